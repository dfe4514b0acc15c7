"""The local end of a tunnel to a cluster's dashboard (`kubectl port-forward`, `ray
dashboard`'s SSH): a free port may be taken by another program between the kit choosing it
and the tunnel binding it; then the dashboard the kit would talk to is that program's (CI
once submitted a job to one and read 'Expecting value' back). The tunnel must give that
port up for a fresh one, and say so when no port can be had."""

import socket
import subprocess
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


# --- through Ray's own SSH runner and a real OpenSSH, as `ray dashboard` forwards on AWS ---

# `ray dashboard` on an AWS config comes down to this: Ray's SSHCommandRunner.run(None,
# port_forward=...) to the head's IP. Here the head is this machine's test sshd: its
# address and port are set on the runner where the provider and port 22 would give them.
RAYS_FORWARD = """\
import subprocess, sys
from ray.autoscaler._private.command_runner import SSHCommandRunner
local, remote, sshd_port, user, key, cluster = sys.argv[1:]
runner = SSHCommandRunner(log_prefix="", node_id="head", provider=None,
                          auth_config={"ssh_user": user, "ssh_private_key": key},
                          cluster_name=cluster, process_runner=subprocess, use_internal_ip=False)
runner.ssh_ip = "127.0.0.1"
runner.ssh_options.arg_dict["Port"] = sshd_port
runner.run(None if remote != "-" else "true", port_forward=None if remote == "-" else [(int(local), int(remote))])
"""


@pytest.fixture
def sshd_server(tmp_path):
    from tests.harness import ssh_testbed

    why = ssh_testbed.why_unavailable()
    if why:
        pytest.skip(f"no test sshd: {why}")
    with ssh_testbed.sshd(tmp_path / "sshd") as server:
        yield server


@pytest.fixture
def dashboard_standin():
    """What the head's dashboard port answers: a line of its own, to tell it by."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"the head's dashboard")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()
    server.server_close()


def rays_ssh(server, cluster: str, remote):
    def command(port):
        return [sys.executable, "-c", RAYS_FORWARD, str(port), str(remote), str(server.port),
                server.user, str(server.key), cluster]
    return command


def masters_of(cluster: str) -> list:
    """The OpenSSH ControlPersist masters Ray's runner left for `cluster`."""
    import psutil

    from scripts.providers.aws.day2 import rays_ssh_master

    is_master = rays_ssh_master(cluster)
    return [p for p in psutil.process_iter() if is_master(p)]


@pytest.mark.parametrize("after_another_command", [False, True], ids=["fresh", "a-master-already-up"])
def test_rays_ssh_forward_through_a_real_openssh_is_taken_as_ours(sshd_server, dashboard_standin, tmp_path,
                                                                   after_another_command):
    """With ControlPersist, the -L listener belongs to OpenSSH's detached master (`ssh:
    <ControlPath> [mux]`, outside the tunnel's process tree): the kit took it for another
    program's and failed every AWS job command on Linux. Fresh, the foreground ssh binds
    and forks the master; a second after another Ray SSH command, that command's master
    binds it for the new client."""
    import urllib.request

    from scripts.providers.aws.day2 import rays_ssh_master

    cluster = f"tunnel-{tmp_path.name[-12:]}"
    try:
        if after_another_command:
            # no pipes: OpenSSH's ControlPersist master keeps the ones it inherits open for
            # as long as it lives; and no input, which `ssh -tt` would read
            subprocess.run(rays_ssh(sshd_server, cluster, "-")(0), check=True, timeout=60,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert masters_of(cluster), "Ray's SSH command left no ControlPersist master"
        with tunnel.forwarded(rays_ssh(sshd_server, cluster, dashboard_standin), "ray dashboard", "hint",
                              also_ours=rays_ssh_master(cluster)) as port:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=10) as answer:
                assert answer.read() == b"the head's dashboard"
            assert masters_of(cluster)  # the case the kit refused: the listener is the master's
    finally:
        for master in masters_of(cluster):
            master.kill()


def test_a_master_of_another_cluster_is_not_ours(sshd_server, dashboard_standin, tmp_path):
    """Only the master of this cluster's control path (Ray's, per cluster and user) counts:
    a tunnel whose port another cluster's master serves is given up as before."""
    from scripts.providers.aws.day2 import rays_ssh_master

    cluster = f"tunnel-{tmp_path.name[-12:]}"
    try:
        with pytest.raises(KitError, match="another program took each of 3 free local ports"):
            with tunnel.forwarded(rays_ssh(sshd_server, cluster, dashboard_standin), "ray dashboard", "hint",
                                  also_ours=rays_ssh_master("some-other-cluster")):
                pass
    finally:
        for master in masters_of(cluster):
            master.kill()


def test_a_port_another_program_took_fails_rays_forward_and_a_fresh_one_is_used(
        monkeypatch, sshd_server, dashboard_standin, taken, tmp_path):
    """Ray's SSH sets ExitOnForwardFailure=yes: on a port another program holds, ssh exits
    and the kit moves on to a fresh port, which the master then serves."""
    from scripts.providers.aws.day2 import rays_ssh_master

    real = tunnel.free_port
    offered = iter([taken])
    monkeypatch.setattr(tunnel, "free_port", lambda: next(offered, None) or real())
    cluster = f"tunnel-{tmp_path.name[-12:]}"
    try:
        with tunnel.forwarded(rays_ssh(sshd_server, cluster, dashboard_standin), "ray dashboard", "hint",
                              also_ours=rays_ssh_master(cluster)) as port:
            assert port != taken
    finally:
        for master in masters_of(cluster):
            master.kill()
