"""How long ``dedupectl`` takes to start: ``--help``, ``--version`` and a command's help, against baselines
measured in the same run.

    python benchmarks/bench_cli_startup.py [--runs 20] [--checkout DIR]
                                           [--out benchmarks/results/cli_startup.json]

Each case is a fresh interpreter, run as the console script runs it (``from dedupectl.cli.app import main``)
from this checkout (or ``--checkout DIR``, another one: an earlier commit, to compare), its output
discarded. The cases are interleaved, one run of each in turn, so that a change in the machine's load falls
on all of them alike; the median and the fastest run of each are printed, with the ratio of each median to
the baselines': ``python -c pass`` (the interpreter alone) and ``python -c "import typer"`` (the CLI
framework alone). The load average before and after is printed too: on a shared machine, compare the ratios.
Python's bytecode cache is on for the runs, as for an installed package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 120)
DEDUPECTL = "from dedupectl.cli.app import main; main()"  # what the console script runs

CASES = {
    "python -c pass": ["-c", "pass"],
    'python -c "import typer"': ["-c", "import typer"],
    "dedupectl --help": ["-c", DEDUPECTL, "--help"],
    "dedupectl --version": ["-c", DEDUPECTL, "--version"],
    "dedupectl run --help": ["-c", DEDUPECTL, "run", "--help"],
    "dedupectl snapshot create --help": ["-c", DEDUPECTL, "snapshot", "create", "--help"],
}
BASELINES = ("python -c pass", 'python -c "import typer"')


def _once(args: list[str], checkout: Path) -> float:
    # bytecode cached, as an installed package has it (the warm-up run writes it; a session with
    # PYTHONDONTWRITEBYTECODE would otherwise compile every module at every start)
    env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "80"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=checkout, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(runs: int, checkout: Path = ROOT) -> dict:
    for args in CASES.values():  # warm the file cache and the bytecode
        _once(args, checkout)
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, args in CASES.items():
            seconds[name].append(_once(args, checkout))
    load_after = os.getloadavg()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "checkout": str(checkout),
        "runs": runs,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": [round(value, 2) for value in load_before],
        "load_after": [round(value, 2) for value in load_after],
        "cases": {
            name: {
                "median_s": round(medians[name], 4),
                "fastest_s": round(min(values), 4),
                **{f"x_{base}": round(medians[name] / medians[base], 2) for base in BASELINES},
            }
            for name, values in seconds.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the dedupectl checkout to start")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cli_startup.json")
    args = parser.parse_args()
    result = measure(args.runs, args.checkout.resolve())
    table = Table(
        title=f"dedupectl start-up ({result['checkout']}), {result['runs']} interleaved runs each (load average before "
        f"{result['load_before'][0]}, after {result['load_after'][0]}, {result['cpus']} cores)",
        title_justify="left",
    )
    for column in ("case", "median s", "fastest s", *(f"x {base}" for base in BASELINES)):
        table.add_column(column, justify="left" if column == "case" else "right")
    for name, figures in result["cases"].items():
        table.add_row(
            name,
            f"{figures['median_s']:.3f}",
            f"{figures['fastest_s']:.3f}",
            *(f"{figures[f'x_{base}']:.2f}" for base in BASELINES),
        )
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
