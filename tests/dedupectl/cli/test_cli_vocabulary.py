"""One CLI, one language: every command's options follow one vocabulary (docs/reference/options.md).

The command tree Typer builds is walked; nothing runs except the few commands that refuse before any I/O.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest
import typer

from dedupectl.cli.app import app

# A short option means one thing everywhere: these, and no other letters.
SHORT = {
    "-b": {"--bootstrap-servers"},
    "-c": {"--config"},
    "-d": {"--data-dir"},
    "-f": {"--family"},
    "-h": {"--help"},
    "-j": {"--jobs"},
    "-k": {"--kind"},
    "-m": {"--metrics"},
    "-n": {"--count", "--last"},  # how many: events the demo makes, jobs compactions shows
    "-o": {"--output-topic"},
    "-p": {"--partition"},  # a partition's number; a count is --partition-count
    "-t": {"--topic"},  # the input topic, which names the stores
    "-w": {"--watch"},
    "-X": {"--kafka-setting"},
}

# Spellings that shipped and were renamed: accepted, hidden from help, only where they shipped.
RETIRED = {
    "-i": "-t",
    "--input-topic": "--topic",
    "--partitions": "--partition-count",
    "--from": "--location",  # in the snapshot commands only: elsewhere --from starts a range
    "--to": "--location",
}
SHIPPED = {
    "-i": {"run", "status", "trace", "reconcile", "topics create", "audit", "replay", "rebuild"},
    "--input-topic": {"run", "status", "trace", "reconcile", "topics create", "audit", "replay", "rebuild"},
    "-p": {"topics create"},  # its partition count, before --partition-count
    "--partitions": {"topics create", "window"},
    "--from": {"snapshot list", "snapshot verify", "snapshot restore", "snapshot prune"},
    "--to": {"snapshot create"},
}
# Visible options whose names must mean one thing: a range of offsets or times, a snapshot's place.
RANGE = {"--from": "start", "--to": "stop"}


def _commands(command: Any = None, path: tuple[str, ...] = ()) -> dict[str, Any]:
    command = command or typer.main.get_command(app)
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        return {" ".join(path): command}
    found = {}
    for name, sub in subcommands.items():
        found.update(_commands(sub, (*path, name)))
    return found


COMMANDS = _commands()


def _options(command: Any, *, hidden: bool) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and bool(p.hidden) == hidden]


def test_the_walk_finds_every_command() -> None:
    assert {"run", "window", "topics create", "snapshot create", "dev broker start"} <= set(COMMANDS)


def test_a_short_option_means_one_thing_everywhere() -> None:
    wrong = []
    for path, command in COMMANDS.items():
        for option in _options(command, hidden=False):
            shorts = [name for name in option.opts if not name.startswith("--")]
            longs = [name for name in option.opts if name.startswith("--")]
            for short in shorts:
                if short not in SHORT or not set(longs) & SHORT[short]:
                    wrong.append(f"{path}: {'/'.join(option.opts)}")
    assert not wrong, "short options outside the vocabulary:\n" + "\n".join(wrong)


def test_a_long_option_names_one_setting_and_a_setting_has_one_name() -> None:
    settings: dict[str, set[str]] = defaultdict(set)  # --name: the parameters it sets
    names: dict[str, set[str]] = defaultdict(set)  # parameter: its --names
    for command in COMMANDS.values():
        for option in _options(command, hidden=False):
            for name in option.opts:
                if name.startswith("--"):
                    settings[name].add(option.name)
                    names[option.name].add(name)
    assert {name: s for name, s in settings.items() if len(s) > 1} == {}
    assert {param: n for param, n in names.items() if len(n) > 1} == {}
    for name, param in RANGE.items():
        assert settings[name] == {param}, f"{name} is a range's {param} wherever it shows"


def test_where_the_id_is_is_said_the_same_way_by_every_command_that_reads_ids() -> None:
    helps: dict[str, set[str]] = defaultdict(set)
    takers: dict[str, set[str]] = defaultdict(set)
    for path, command in COMMANDS.items():
        for option in _options(command, hidden=False):
            for name in set(option.opts) & {"--id-field", "--id-header"}:
                helps[name].add(option.help)
                takers[name].add(path)
    assert takers["--id-field"] == takers["--id-header"] == {"run", "trace", "audit", "replay"}
    assert all(len(texts) == 1 for texts in helps.values()), helps


def test_retired_spellings_are_hidden_and_kept_where_they_shipped() -> None:
    visible = [
        f"{path}: {name}"
        for path, command in COMMANDS.items()
        for option in _options(command, hidden=False)
        for name in option.opts
        if name in RETIRED and not (name in RANGE and option.name == RANGE[name])
    ]
    assert not visible, "retired spellings shown in help:\n" + "\n".join(visible)
    kept = defaultdict(set)
    for path, command in COMMANDS.items():
        for option in _options(command, hidden=True):
            for name in option.opts:
                kept[name].add(path)
    assert dict(kept) == SHIPPED


def _refusal(*args: str) -> str:
    """The one error line of a command that refuses before any I/O (through the entry point, as people see it)."""
    result = subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2, result.stderr
    return result.stderr


def test_an_old_spelling_sets_the_same_option() -> None:
    # the worker commands check their topics before any I/O: the old -i is the input topic
    assert "three different topics" in _refusal("reconcile", "-p", "0", "-b", "127.0.0.1:9", "-i", "a", "-o", "a")
    assert "--topic and --input-topic are one option, given twice" in _refusal(
        "status", "-b", "127.0.0.1:9", "-i", "a", "-t", "b", "-o", "c"
    )
    assert "--partition-count and -p/--partitions are one option" in _refusal(
        "topics", "create", "-b", "127.0.0.1:9", "-t", "a", "-o", "b", "-p", "2", "--partition-count", "3"
    )
    assert "no partition count given" in _refusal("topics", "create", "-b", "127.0.0.1:9", "-t", "a", "-o", "b")


def test_the_old_input_topic_flag_where_it_never_shipped_is_refused_with_the_new_name() -> None:
    refusal = _refusal("window", "-d", "data", "-i", "events")
    assert "No such option: -i: the input topic is -t/--topic" in refusal


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["age", "-d", "{data}", "--max-keys", "0"], "--max-keys must be a positive whole number, got 0"),
        (["run", "-b", "x", "-t", "a", "-o", "b", "--batch-max-messages", "-5"], "--batch-max-messages must be"),
        (["run", "-b", "x", "-t", "a", "-o", "b", "--max-keys", "0"], "--max-keys must be a positive whole number"),
        (["run", "-b", "x", "-t", "a", "-o", "b", "--id-field", "/a~2"], "--id-field '/a~2' is not a JSON Pointer"),
        (
            ["trace", "m-1", "-b", "x", "-t", "a", "-o", "b", "--id-header", "ce_id", "--id-field", "id"],
            "--id-header and --id-field are two places for the id",
        ),
    ],
)
def test_an_error_names_the_flag_not_the_config_key(tmp_path, args: list[str], named: str) -> None:
    output = _refusal(*[arg.replace("{data}", str(tmp_path)) for arg in args])
    assert named in output
