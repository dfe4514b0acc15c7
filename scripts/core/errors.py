"""The one exception the kit raises for a user's mistake, and how its message is kept short."""


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


def not_running(cluster: str) -> str:
    """The one line for a cluster whose record stands but whose processes are gone (killed,
    or dead under a command), instead of whatever Ray's client raised."""
    return (f"cluster '{cluster}' is not running (its record is stale); `make down "
            f"CLUSTER={cluster}` then `make up CLUSTER={cluster}`")


def one_line(text: str, limit: int = 600) -> str:
    """Newlines folded, length capped: a hostile input never makes a long error."""
    text = " | ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short(value, limit: int = 60) -> str:
    """A value as an error message may quote it: repr, capped."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"
