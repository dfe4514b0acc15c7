"""The local end of a tunnel to a cluster's dashboard (`kubectl port-forward`, `ray
dashboard`'s SSH): a free port may be taken by another program between the kit choosing it
and the tunnel binding it; then the dashboard the kit would talk to is that program's (CI
once submitted a job to one and read 'Expecting value' back). The tunnel must give that
port up for a fresh one, and say so when no port can be had."""

import socket
import sys

import pytest

from scripts.core import tunnel
from scripts.core.errors import KitError

# a forwarder's stand-in: listens on the port it is given after DELAY seconds, then waits
FORWARDER = ("import socket, sys, time\n"
             "time.sleep(float(sys.argv[2]))\n"
             "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
             "time.sleep(60)\n")


@pytest.fixture
def taken():
    """A port another program listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# 0 s: the forwarder fails to bind and exits; 1 s: the other program answers first, while
# the forwarder is still starting
@pytest.mark.parametrize("delay", ["0", "1"])
def test_a_port_another_program_took_is_given_up_for_a_fresh_one(monkeypatch, taken, delay):
    real = tunnel.free_port
    offered = iter([taken])
    monkeypatch.setattr(tunnel, "free_port", lambda: next(offered, None) or real())
    commands = []

    def command(port):
        commands.append(port)
        return [sys.executable, "-c", FORWARDER, str(port), delay]

    with tunnel.forwarded(command, "forwarder", "hint") as port:
        assert port != taken and commands == [taken, port]
        with socket.create_connection(("127.0.0.1", port)):
            pass


def test_no_port_to_be_had_is_one_error_line(monkeypatch, taken):
    monkeypatch.setattr(tunnel, "free_port", lambda: taken)
    with pytest.raises(KitError, match=r"^`forwarder`: another program took each of 3 free local "
                                       r"ports before it could listen; try again$"):
        with tunnel.forwarded(lambda port: [sys.executable, "-c", FORWARDER, str(port), "0"],
                              "forwarder", "hint"):
            pass


def test_a_forwarder_that_exits_says_its_last_line():
    with pytest.raises(KitError, match=r"^`forwarder` exited: 'no route'; is it up\?$"):
        with tunnel.forwarded(lambda port: [sys.executable, "-c", "import sys; sys.exit('no route')"],
                              "forwarder", "is it up?"):
            pass
