"""The one exception the kit raises for a user's mistake, and how its message is kept short."""

import sys


class KitError(Exception):
    """A user-facing error: the CLI prints `error: <message>` on one line and exits 2,
    launching nothing. The message says what is wrong and how to fix it."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


class CapacityRefused(KitError):
    """The cloud had no capacity for a node in the zone the preflight picked (AWS's
    InsufficientInstanceCapacity): nothing of the node was launched, and another zone may
    have some. `make up` then preflights again without that zone."""

    def __init__(self, zone: str, message: str):
        super().__init__(message)
        self.zone = zone


class NoAccount(KitError):
    """The cloud cannot be asked: no credentials on this machine, or AWS refuses the ones
    here (expired SSO, a deleted key). `make up` stops at it; a dry run goes on with what
    it can say offline, and says so."""


def command_exit(body) -> int:
    """Run a command's body and return its exit code, as every entry point of the kit ends
    (`make` targets, benchmarks): the body's own; 2 after one `error:` line for a KitError
    (bad input, a failed run); 130 after Ctrl-C (or a `kill` the caller made one)."""
    try:
        return body()
    except KitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def not_running(cluster: str) -> str:
    """The one line for a cluster whose record stands but whose processes are gone (killed,
    or dead under a command), instead of whatever Ray's client raised."""
    return (f"cluster '{cluster}' is not running (its record is stale); `make down "
            f"CLUSTER={cluster}` then `make up CLUSTER={cluster}`")


def cloud_error(error: Exception) -> str | None:
    """The one line for a cloud API that could not be reached, that answered with something
    that is not its answer (a proxy's or a login portal's HTML page: botocore's
    ResponseParserError, which is no ClientError and no BotoCoreError), or that refused a
    call (a ClientError: AccessDenied or UnauthorizedOperation for a least-privilege user or
    an organisation's SCP, throttling past botocore's retries); None for any other error.
    Wherever in the kit an AWS call meets one, the CLI prints this, not an internal error.
    botocore is only looked at where something imported it."""
    import sys

    parsers, exceptions = sys.modules.get("botocore.parsers"), sys.modules.get("botocore.exceptions")
    if parsers and isinstance(error, parsers.ResponseParserError):
        return ("AWS's API answered with something that is not AWS's answer (a proxy's or a login "
                "page's?); check this machine's network and its HTTPS_PROXY, then try again")
    if exceptions and isinstance(error, (exceptions.EndpointConnectionError, exceptions.ConnectTimeoutError,
                                         exceptions.ReadTimeoutError, exceptions.ProxyConnectionError,
                                         exceptions.SSLError)):
        return (f"AWS's API could not be reached ({type(error).__name__}: {one_line(str(error), 160)}); "
                "check this machine's network and its HTTPS_PROXY, then try again")
    if exceptions and isinstance(error, exceptions.ClientError):
        return aws_refusal(error)
    return None


CREDENTIALS_REJECTED = {"AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException",
                        "ExpiredToken", "ExpiredTokenException", "SignatureDoesNotMatch",
                        "InvalidAccessKeyId", "RequestExpired"}
THROTTLED = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
             "RequestThrottled", "SlowDown"}


def aws_refusal(error) -> str:
    """A botocore ClientError as one line naming the operation, AWS's code and the fix."""
    info = error.response.get("Error", {}) if isinstance(getattr(error, "response", None), dict) else {}
    code, message = str(info.get("Code") or "unknown"), one_line(str(info.get("Message") or ""), 200)
    operation = str(getattr(error, "operation_name", None) or "a call")
    said = f"{code}: {message}" if message else code
    if code in CREDENTIALS_REJECTED:
        return (f"AWS rejected the credentials at {operation} ({said}); check them with `aws sts "
                "get-caller-identity` (SSO: `aws sso login`), and this machine's clock")
    if code in THROTTLED:
        return (f"AWS throttled {operation} past botocore's retries ({said}); wait a minute and "
                "try again (AWS_MAX_ATTEMPTS raises the retries)")
    return (f"AWS refused {operation} ({said}); your identity needs the rights docs/aws.md lists "
            "(`make render` writes them as build/clusters/<CLUSTER>.user-policy.json), or an "
            "organisation's policy (SCP) forbids it")


def one_line(text: str, limit: int = 600) -> str:
    """Newlines folded, length capped: a hostile input never makes a long error."""
    text = " | ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(value, limit: int = 60) -> str:
    """A value as an error message may quote it: repr, capped."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"
