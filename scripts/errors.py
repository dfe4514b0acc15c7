"""The one exception the kit raises for bad input: its message says what and how to fix."""


class KitError(Exception):
    """A user-facing error; the CLI prints its message and exits 2, launching nothing."""
