"""Signals around a teardown: it runs to the end, whatever the user presses."""

import signal
from contextlib import contextmanager


@contextmanager
def signals_deferred():
    """Teardown runs to the end through any number of Ctrl-C, SIGTERM and SIGHUP."""
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in caught}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
