"""boto3 clients and the translation of AWS failures into one-line operator errors.

Endpoints: ``--endpoint-url`` wins; for S3 then ``DEDUPECTL_S3_ENDPOINT_URL``; otherwise boto3's own
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` and region settings apply as usual.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from snapshots.errors import CloudError
from store.errors import ConfigError, DedupeError

S3_ENDPOINT_ENV = "DEDUPECTL_S3_ENDPOINT_URL"

_PERMISSION = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden", "403"})
FORBIDDEN = frozenset({"AccessDenied", "Forbidden", "403"})  # S3's answers that may also mean bad credentials
_BAD_CREDENTIALS = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AuthFailure",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
    }
)
_NOT_FOUND = frozenset(
    {
        "404",
        "NotFound",
        "NoSuchKey",
        "InvalidVolume.NotFound",
        "InvalidVolumeID.Malformed",
        "InvalidInstanceID.NotFound",
        "InvalidInstanceID.Malformed",
        "InvalidSnapshot.NotFound",
        "InvalidSnapshotID.Malformed",
    }
)


def check_endpoint_url(url: str, what: str) -> str:
    """``url`` when it is an http(s) URL with a host; a ConfigError naming ``what`` otherwise."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} {url!r} is not an endpoint URL", "write it as http(s)://host[:port]")
    return url


@dataclass(frozen=True)
class AwsOptions:
    region: str | None = None
    endpoint_url: str | None = None

    def endpoint_for(self, service: str) -> str | None:
        if self.endpoint_url:
            return check_endpoint_url(self.endpoint_url, "--endpoint-url")
        if service == "s3" and os.environ.get(S3_ENDPOINT_ENV):
            return check_endpoint_url(os.environ[S3_ENDPOINT_ENV], S3_ENDPOINT_ENV)
        return None  # boto3 reads AWS_ENDPOINT_URL[_<SERVICE>] itself

    def client(self, service: str, max_pool_connections: int = 10):
        import boto3
        from botocore.config import Config

        config = Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=max_pool_connections)
        endpoint = self.endpoint_for(service)
        with aws_errors(f"{service} client", endpoint or service):
            session = boto3.session.Session(region_name=self.region)
            try:
                return session.client(service, endpoint_url=endpoint, config=config)
            except ValueError as error:  # boto3's own check of AWS_ENDPOINT_URL[_<SERVICE>], say
                raise ConfigError(
                    f"AWS endpoint for {service}: {error}", "write it as http(s)://host[:port]"
                ) from error


def error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def translate_aws_error(error: Exception, action: str, resource: str) -> DedupeError:
    """One operator-facing error for a boto3/botocore failure of ``action`` (an IAM action name) on
    ``resource``."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return CloudError(
            "no AWS credentials found",
            "set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where an instance role applies",
        )
    if isinstance(error, NoRegionError):
        return CloudError("no AWS region configured", "pass --region or set AWS_DEFAULT_REGION")
    if isinstance(error, EndpointConnectionError):
        return CloudError(
            f"cannot reach the AWS endpoint ({error})",
            f"check --endpoint-url / {S3_ENDPOINT_ENV} / AWS_ENDPOINT_URL and the network",
        )
    if not isinstance(error, ClientError):
        return CloudError(f"AWS {action} on {resource} failed: {error}")
    code = error_code(error)
    message = str(error.response.get("Error", {}).get("Message") or "").strip()
    detail = f" ({message})" if message else ""
    if code == "NoSuchBucket" or (code in {"404", "NotFound"} and action == "s3:ListBucket"):
        bucket = resource.removeprefix("s3://").split("/", 1)[0]
        return CloudError(f"S3 bucket {bucket!r} does not exist", "create it first, or fix the s3:// destination")
    if code in _PERMISSION:
        return CloudError(
            f"permission denied: these AWS credentials may not call {action} on {resource}{detail}",
            f"grant {action} to the IAM user or role in use",
        )
    if code in _BAD_CREDENTIALS:
        return CloudError(f"AWS rejected the credentials ({code})", "check the access key, session token and clock")
    if code == "VolumeInUse":
        return CloudError(
            f"volume {resource} is in use{detail}", "detach it first (dedupectl reattach does), or stop its instance"
        )
    if code == "InvalidVolume.ZoneMismatch":
        return CloudError(
            f"volume and instance are in different availability zones{detail}",
            "a volume attaches only within its zone: snapshot it (--location ebs:…), restore it in the target's zone",
        )
    if code == "IncorrectState" or code == "IncorrectInstanceState":
        return CloudError(f"{resource} is not in a state that allows {action}{detail}", "wait, then retry")
    if code in _NOT_FOUND:
        return CloudError(f"{resource} does not exist{detail}", "check the id and the region (--region)")
    return CloudError(f"AWS {action} on {resource} failed: {code}{detail}")


@contextmanager
def aws_errors(action: str, resource: str) -> Iterator[None]:
    """Turn any boto3/botocore failure inside the block into the matching CloudError."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise translate_aws_error(error, action, resource) from error


def explain_forbidden(aws: AwsOptions, action: str, resource: str) -> DedupeError:
    """A 403 on ``action``: STS GetCallerIdentity says whether the credentials themselves are rejected (its own
    error code) or valid and merely lacking the permission (it names the caller)."""
    from botocore.exceptions import BotoCoreError, ClientError

    s3_elsewhere = not aws.endpoint_url and (
        os.environ.get(S3_ENDPOINT_ENV)
        or (os.environ.get("AWS_ENDPOINT_URL_S3") and not os.environ.get("AWS_ENDPOINT_URL_STS"))
    )
    caller = None
    if not s3_elsewhere:  # else STS would judge credentials meant for another endpoint
        try:
            caller = aws.client("sts").get_caller_identity().get("Arn", "?")
        except ClientError as error:
            code = error_code(error)
            if code in _BAD_CREDENTIALS:
                return CloudError(
                    f"AWS rejected the credentials ({code}) on {action} of {resource}",
                    "check the access key id, the secret key, the session token and the clock",
                )
        except (BotoCoreError, DedupeError):
            pass  # no STS there: cannot tell
    if caller is None:
        return CloudError(
            f"AWS refused {action} on {resource} (403): the credentials are rejected or lack that permission",
            f"check the access key and secret; grant {action} to the IAM user or role in use",
        )
    return CloudError(
        f"permission denied: these AWS credentials ({caller}) may not call {action} on {resource}",
        f"grant {action} to the IAM user or role in use",
    )
