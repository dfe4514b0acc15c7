"""The head's watchdog under its shell loop (aws/render.py's autostop_command), run for real
in bash: a stand-in watchdog that fails is restarted, one that ends its teardown (exit 0)
is not, a second `ray up` ends the first loop and its watchdog; and the real watchdog beats
its heartbeat every round (the head's dead-man switch reads its age)."""

import os
import signal
import subprocess
import sys
import time

from scripts.build import build
from scripts.node import autostop
from scripts.providers.aws import render as aws_render

# exits 1 on its first run, then runs on (a live watchdog) or exits 0 (its teardown done),
# as the file `then` says; each run appends its pid and arguments to runs.txt
STAND_IN = """import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "runs.txt"), "a") as f:
    f.write(f"{os.getpid()} {' '.join(sys.argv[1:])}\\n")
runs = open(os.path.join(here, "runs.txt")).read().count("\\n")
if runs == 1:
    sys.exit(1)
if open(os.path.join(here, "then")).read() == "exit":
    sys.exit(0)
time.sleep(600)
"""


def rendered_loop(tmp_path):
    """The rendered command, its files under tmp_path instead of /tmp and its pause 0.2 s."""
    command = aws_render.autostop_command(build("hetero").values)
    assert f"sleep {aws_render.WATCHDOG_RESTART_S};" in command
    return command.replace("/tmp/", f"{tmp_path}/").replace(
        f"sleep {aws_render.WATCHDOG_RESTART_S};", "sleep 0.2;")


def start(tmp_path, command, then: str | None = None):
    """Run the command as a head start command would; `then` (exit | run): what the
    stand-in watchdog does after its first, failing run."""
    home = tmp_path / "home"
    programs = home / "raykit_node"
    programs.mkdir(parents=True, exist_ok=True)
    (programs / "autostop.py").write_text(STAND_IN)
    if then:
        (programs / "then").write_text(then)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    env = {"HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", command], env=env, check=True, timeout=30)
    return programs


def runs(programs, count, timeout_s=20):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        lines = (programs / "runs.txt").read_text().splitlines() if (programs / "runs.txt").exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.1)
    raise AssertionError(f"{count} runs expected, saw {lines}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return open(f"/proc/{pid}/stat").read().split()[2] != "Z"


def wait_gone(*pids: int, timeout_s: float = 10) -> None:
    deadline = time.time() + timeout_s
    while any(alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.1)


def end_loop(tmp_path):
    pid = int((tmp_path / "raykit-watchdog.pid").read_text())
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_failing_watchdog_is_restarted_and_a_finished_one_is_not(tmp_path):
    programs = start(tmp_path, rendered_loop(tmp_path), then="exit")
    try:
        first, second = runs(programs, 2)
        assert "--aws hetero us-east-1" in first and f"--heartbeat {tmp_path}/raykit-watchdog.heartbeat" in first
        loop = int((tmp_path / "raykit-watchdog.pid").read_text())
        wait_gone(loop)
        assert not alive(loop)  # exit 0: the teardown ran, the loop ends
        assert len(runs(programs, 2)) == 2
        assert "the watchdog exited (1); restarting" in (tmp_path / "raykit-autostop.log").read_text()
    finally:
        end_loop(tmp_path)


def test_a_second_ray_up_ends_the_first_loop_and_its_watchdog(tmp_path):
    command = rendered_loop(tmp_path)
    programs = start(tmp_path, command, then="run")
    try:
        _, running = runs(programs, 2)
        first_loop, first_watchdog = int((tmp_path / "raykit-watchdog.pid").read_text()), int(running.split()[0])
        assert alive(first_watchdog)
        start(tmp_path, command)  # `ray up` again: its head start commands run again
        third = runs(programs, 3)[2]
        wait_gone(first_loop, first_watchdog)
        assert not alive(first_loop) and not alive(first_watchdog)
        assert alive(int(third.split()[0])) and int((tmp_path / "raykit-watchdog.pid").read_text()) != first_loop
    finally:
        end_loop(tmp_path)


def test_a_pid_file_naming_another_process_is_not_killed(tmp_path):
    """The pid file is the container's, but a stale one may name a process that is not the
    loop (pids are reused): that process lives on."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (tmp_path / "raykit-watchdog.pid").write_text(str(other.pid))
        programs = start(tmp_path, rendered_loop(tmp_path), then="exit")
        runs(programs, 2)  # the new loop ran (and wrote its own pid), the check long done
        assert other.poll() is None
    finally:
        other.kill()
        end_loop(tmp_path)


def test_the_watchdog_beats_its_heartbeat_every_round(tmp_path):
    """The real watch loop against a job API that is not there: every round touches the
    heartbeat, until its teardown."""
    heartbeat, beats = tmp_path / "heartbeat", []
    original = autostop.beat

    def counted(path):
        original(path)
        beats.append(os.stat(path).st_mtime)
    autostop.beat = counted
    try:
        torn = []
        autostop.watch("http://127.0.0.1:1", 0.5, lambda: torn.append(True), poll_s=0.1,
                       heartbeat=str(heartbeat))
    finally:
        autostop.beat = original
    assert torn and len(beats) >= 3 and beats == sorted(beats)
    assert time.time() - heartbeat.stat().st_mtime < 5
