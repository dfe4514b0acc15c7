"""A real OpenSSH server on loopback for the tests of what the kit runs through SSH (`ray
dashboard`'s port forward to an AWS head): Debian's openssh-server, started by a test on a
free port of 127.0.0.1 with a host key, a client key and a config of its own; never the
system's sshd, its config or port 22.

    python -m tests.harness.ssh_testbed ensure   # `make test`: install openssh-server if missing

Installing needs root and apt-get; where either is missing `ensure` says so in one line and
the tests that need sshd are skipped; under CI=true that is an error."""

import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
# The user the test's SSH logs in as where the tests run as root: one with a home of its own
# and no dotfiles, as a fresh head's login user. Ray runs every remote command in a login
# shell that sources ~/.bashrc, and root's here (pyenv's init, whose rehash waits on a lock
# another process may hold) hung a test for a minute.
TEST_USER = "raykit-ssh-test"
PACKAGE = "openssh-server"
PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd refuses to start without it


def why_unavailable() -> str | None:
    """Why no test sshd can run here, in a few words; None where it can."""
    if not Path(SSHD).exists():
        return f"{SSHD} is missing (`apt-get install {PACKAGE}`, as root)"
    if not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "the OpenSSH client (ssh, ssh-keygen) is missing"
    if not PRIVSEP_DIR.is_dir() and os.geteuid() != 0:
        return f"{PRIVSEP_DIR} is missing and only root can make it"
    return None


def ensure() -> None:
    """`make test`'s set-up: install openssh-server where it is missing and this machine
    can (root, apt-get); else one line, and under CI=true an error."""
    if Path(SSHD).exists():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"+ apt-get install {PACKAGE} (the SSH tests' server)", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        installed = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGE],
                                   env=env, stdout=subprocess.DEVNULL)
        if installed.returncode != 0:  # an old package list: read it once, then again
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGE],
                           env=env, stdout=subprocess.DEVNULL, check=True)
        return
    line = f"ssh testbed: {why_unavailable()}; the tests through a real sshd are skipped"
    if os.environ.get("CI") == "true":
        sys.exit(f"error: {line}, and under CI=true every test must run")
    print(line, flush=True)


@dataclass(frozen=True)
class Server:
    port: int
    user: str
    key: Path  # the client's private key, which the server accepts


def login_user() -> str:
    """TEST_USER (made once, with an empty home) where this runs as root; else this user."""
    if os.geteuid() != 0:
        return getpass.getuser()
    import pwd

    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        # password '*': none to log in with, and not locked ('!'), which sshd without PAM refuses
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", TEST_USER],
                       check=True, stdout=subprocess.DEVNULL)
    return TEST_USER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def sshd(folder: Path):
    """A running sshd on 127.0.0.1 that lets this user in with the yielded Server's key,
    and forwards ports (what `ray dashboard` asks of it); stopped with every process it
    started (each connection's), and so every client master connected to it ends too."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    # sshd reads the key list as the user logging in: a folder of its own that user can
    # read (pytest's tmp folders are root's alone)
    readable = Path(tempfile.mkdtemp(prefix="raykit-sshd-"))
    readable.chmod(0o755)
    authorized = readable / "authorized_keys"
    authorized.write_text((folder / "client_key.pub").read_text())
    authorized.chmod(0o644)
    if not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755)
    user = login_user()
    config = folder / "sshd_config"
    for _ in range(3):  # a port another program took before sshd bound it: a fresh one
        port = free_port()
        config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
                          f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile {authorized}\n"
                          "PubkeyAuthentication yes\nPasswordAuthentication no\n"
                          "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
                          "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nLogLevel ERROR\n")
        server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        deadline = time.monotonic() + 20
        while server.poll() is None and time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        if server.poll() is None:
            break
    else:
        raise RuntimeError(f"sshd did not start: {server.stderr.read()[-500:]}")
    try:
        yield Server(port=port, user=user, key=folder / "client_key")
    finally:
        stop_group(server)
        shutil.rmtree(readable, ignore_errors=True)


def stop_group(process: subprocess.Popen) -> None:
    """sshd and each connection's sshd it forked (each in a session of its own: setsid):
    gone before this returns, so every client connected to them (a ControlPersist master)
    loses its connection and exits."""
    import psutil

    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.kill()
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait(timeout=10)
    gone, alive = psutil.wait_procs(children, timeout=10)
    if alive:
        raise RuntimeError(f"sshd's connection processes outlived it: {[p.pid for p in alive]}")


if __name__ == "__main__":
    if sys.argv[1:] != ["ensure"]:
        sys.exit("usage: python -m tests.harness.ssh_testbed ensure")
    ensure()
