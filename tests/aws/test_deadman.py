"""The nodes' dead-man switch (scripts/node/deadman.py): its clock as a unit, its look for a
raylet and the head watchdog's heartbeat in a /proc of our making, and how `make up` starts
it on every AWS host."""

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from scripts.providers.aws import render as aws_render
from scripts.build import build
from scripts.node.deadman import CANNOT_LOOK, heartbeat_age, raylet_pid, should_power_off, watch

GRACE_S, IDLE_S = 45 * 60, 10 * 60


def test_no_raylet_ever_powers_off_after_the_grace_from_boot():
    assert not should_power_off(now=GRACE_S - 1, started=0, last_raylet=None, grace_s=GRACE_S, idle_s=IDLE_S)
    assert should_power_off(now=GRACE_S + 1, started=0, last_raylet=None, grace_s=GRACE_S, idle_s=IDLE_S)


def test_a_raylet_gone_powers_off_after_idle_not_before():
    seen = GRACE_S * 3  # long after the grace: only the raylet's absence counts
    assert not should_power_off(seen + IDLE_S - 1, 0, seen, GRACE_S, IDLE_S)
    assert should_power_off(seen + IDLE_S + 1, 0, seen, GRACE_S, IDLE_S)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def run_watch(raylet_at, beat_age_at=None, watchdog_s=None) -> tuple[str, float]:
    """watch() on a stand-in clock; raylet_at(t) gives the raylet's pid at t (falsy: none),
    beat_age_at(t) the watchdog heartbeat's age. Returns why it powered off and when."""
    clock, powered = Clock(), []
    why = watch(GRACE_S, IDLE_S, lambda: powered.append(clock.now),
                running=lambda: raylet_at(clock.now), clock=clock, sleep=clock.sleep, poll_s=30,
                watchdog_s=watchdog_s, beat_age=beat_age_at and (lambda pid: beat_age_at(clock.now)))
    return why, powered[0]


WATCHDOG_S = aws_render.WATCHDOG_SILENT_MIN * 60
SILENT = f"the watchdog silent for {aws_render.WATCHDOG_SILENT_MIN} min while Ray runs"


def test_the_heads_watchdog_dead_for_good_powers_the_head_off_while_ray_runs():
    """Ray up from minute 5; the watchdog beats every 10 s until hour 3, then never again
    (its loop killed): off WATCHDOG minutes later, though the raylet lives on."""
    why, at = run_watch(lambda t: 4242 if t >= 300 else None,
                        lambda t: 10 if t < 3 * 3600 else t - 3 * 3600, WATCHDOG_S)
    assert why.startswith(SILENT) and 3 * 3600 + WATCHDOG_S < at <= 3 * 3600 + WATCHDOG_S + 30


def test_a_watchdog_that_never_beats_is_given_its_time_from_the_raylets_start():
    why, at = run_watch(lambda t: 4242 if t >= 300 else None, lambda t: None, WATCHDOG_S)
    assert why.startswith(SILENT) and 300 + WATCHDOG_S < at <= 300 + WATCHDOG_S + 30


def test_a_new_raylet_gives_its_watchdog_time_though_the_heartbeat_left_is_stale():
    """A `ray up` on a head whose heartbeat file is an hour old (the last watchdog's): the
    new raylet's watchdog is given its time, beats at 20 s, and the head stays up until
    its raylet is gone."""
    why, at = run_watch(lambda t: 2000 if t < 20000 else None, lambda t: 3600 if t < 20 else 5, WATCHDOG_S)
    assert why == "no raylet for 10 min" and at > 20000


def test_workers_watch_no_watchdog_and_a_proc_that_cannot_be_read_powers_nothing_off():
    why, at = run_watch(lambda t: 4242 if t < 9 * 3600 else None, lambda t: 10**6, None)
    assert why == "no raylet for 10 min" and at > 9 * 3600
    why, at = run_watch(lambda t: CANNOT_LOOK if t < 9 * 3600 else None, lambda t: 10**6, WATCHDOG_S)
    assert at > 9 * 3600  # blind: no heartbeat is judged


def test_the_heartbeat_is_read_inside_the_raylets_container(tmp_path):
    beat = tmp_path / "4242" / "root" / "tmp" / "raykit-watchdog.heartbeat"
    beat.parent.mkdir(parents=True)
    beat.touch()
    os.utime(beat, (1000, 1000))
    assert heartbeat_age(4242, "/tmp/raykit-watchdog.heartbeat", str(tmp_path), now=lambda: 1100) == 100
    assert heartbeat_age(4243, "/tmp/raykit-watchdog.heartbeat", str(tmp_path), now=lambda: 1100) is None


def test_watch_setup_that_never_starts_ray():
    why, at = run_watch(lambda t: False)
    assert why == "no raylet within 45 min of boot" and GRACE_S < at <= GRACE_S + 30


def test_watch_ray_stopped_by_a_watchdog_whose_terminate_failed():
    """Ray ran from minute 20 to hour 5, then stopped: off 10 minutes after."""
    why, at = run_watch(lambda t: 20 * 60 <= t < 5 * 3600)
    assert why == "no raylet for 10 min" and 5 * 3600 + IDLE_S - 30 < at <= 5 * 3600 + IDLE_S + 30


def test_raylet_is_found_by_its_process_name(tmp_path):
    for pid, name in ((1, "systemd"), (4242, "raylet"), (77, "gcs_server")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
    (tmp_path / "self").mkdir()
    assert raylet_pid(str(tmp_path)) == 4242
    (tmp_path / "4242" / "comm").write_text("raylet_monitor\n")
    assert raylet_pid(str(tmp_path)) is None
    assert raylet_pid(str(tmp_path / "absent")) == CANNOT_LOOK  # cannot look: never power off blind


def test_this_host_without_ray_has_no_raylet_and_the_program_runs_standalone():
    """The file runs with nothing of the kit (it is shipped alone) and answers --help."""
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "node" / "deadman.py"), "--help"],
                         capture_output=True, text=True, timeout=30, cwd="/",
                         env={"PATH": os.environ["PATH"]})
    assert run.returncode == 0 and "--grace-minutes" in run.stdout


# The oldest host Python docs/aws.md allows an AMI of one's own (Ubuntu 20.04's); the node
# programs run under the host's or Ray's container's python3, never the kit's.
OLDEST_HOST_PYTHON = "3.8"


def oldest_host_python() -> str | None:
    """A python3.8 interpreter itself (pyenv's, not its shim, which needs a version chosen)."""
    found = sorted((Path.home() / ".pyenv" / "versions").glob(f"{OLDEST_HOST_PYTHON}.*/bin/python{OLDEST_HOST_PYTHON}"))
    return str(found[-1]) if found else shutil.which(f"python{OLDEST_HOST_PYTHON}")


@pytest.mark.parametrize("program", sorted(p.name for p in (REPO / "scripts" / "node").glob("*.py")))
def test_every_node_program_runs_under_the_oldest_host_python(program):
    """An annotation such as `int | None` is evaluated when its `def` runs: under a host's
    older python3 the dead-man raised TypeError at import, and systemd restarted it for
    ever with no switch armed."""
    python = oldest_host_python()
    if python is None:
        pytest.skip(f"no python{OLDEST_HOST_PYTHON} on this machine")
    run = subprocess.run([python, str(REPO / "scripts" / "node" / program), "--help"],
                         capture_output=True, text=True, timeout=60, cwd="/",
                         env={"PATH": os.environ["PATH"]})
    assert run.returncode == 0, run.stderr[-400:]
    assert run.stdout.startswith("usage:")


def test_every_aws_node_starts_the_switch_at_boot_and_powering_off_terminates():
    """The user data (cloud-init, as root, before SSH, Docker and Ray): the program, byte
    for byte, and the systemd unit; on every node type, with shutdown = terminate; the
    head's also watches its watchdog's heartbeat, the workers' do not."""
    config = build("hetero").config
    for name, node_type in config["available_node_types"].items():
        node_config = node_type["node_config"]
        assert node_config["InstanceInitiatedShutdownBehavior"] == "terminate"
        script = node_config["UserData"]
        assert script.startswith("#!/bin/bash\n")
        encoded = script.split("echo ", 1)[1].split(" ", 1)[0]
        assert base64.b64decode(encoded) == (REPO / "scripts" / "node" / "deadman.py").read_bytes()
        assert ("ExecStart=/usr/bin/env python3 "
                f"/opt/raykit/deadman.py --grace-minutes {aws_render.DEADMAN_GRACE_MIN} "
                f"--idle-minutes {aws_render.DEADMAN_IDLE_MIN}") in script
        watched = (f"--watchdog-minutes {aws_render.WATCHDOG_SILENT_MIN} "
                   f"--heartbeat {aws_render.WATCHDOG_HEARTBEAT}")
        assert (watched in script) == (name == config["head_node_type"]), name
        assert len(script) < 16 * 1024  # EC2's limit on user data


def test_the_switch_is_an_enabled_service_that_comes_back_after_a_reboot(tmp_path):
    """A transient unit (systemd-run) is gone after a reboot, and Ray's container (--rm)
    too: the host ran on, passing its status checks, with nothing to power it off. The user
    data, run here with its two folders moved under tmp_path and a stand-in systemctl,
    installs an enabled unit started at every boot (multi-user.target) that restarts."""
    config = build("hetero").config
    script = config["available_node_types"][config["head_node_type"]]["node_config"]["UserData"]
    script = script.replace("/opt/raykit", str(tmp_path / "opt")).replace("/etc/systemd/system", str(tmp_path / "etc"))
    (tmp_path / "etc").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "systemctl.log"}\n')
    (bin_dir / "systemctl").chmod(0o755)
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "opt" / "deadman.py").read_bytes() == (REPO / "scripts" / "node" / "deadman.py").read_bytes()
    unit = (tmp_path / "etc" / "raykit-deadman.service").read_text()
    assert "WantedBy=multi-user.target" in unit and "Restart=always" in unit
    assert f"--heartbeat {aws_render.WATCHDOG_HEARTBEAT}" in unit
    assert (tmp_path / "systemctl.log").read_text().splitlines() == [
        "daemon-reload", "enable --now raykit-deadman.service"]


def test_the_data_volume_line_formats_once_and_mounts_in_real_bash(tmp_path):
    """The nodes' initialization commands as bash runs them (stand-ins for sudo, lsblk,
    blkid, mkfs, mountpoint, mount and chown, each logging its call): the volume is found
    by its exact size, formatted only where it holds no filesystem (a rebooted or reused
    node keeps its data), mounted where not yet mounted, and handed to the container's user."""
    host = tmp_path / "data"
    docker = {"volumes": [{"host": str(host), "container": "/data"}]}
    commands = aws_render.host_dir_commands(docker, [100])
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    size = 100 * 1024**3
    tools = {
        "sudo": 'exec "$@"',
        "lsblk": f'echo "/dev/nvme0n1 {75 * 1024**3}"; echo "/dev/nvme1n1 {size}"',
        "blkid": '[ -n "$FORMATTED" ]',
        "mkfs.ext4": "true", "mount": "true", "chown": "true",
        "mountpoint": '[ -n "$MOUNTED" ]',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {log}\n{body}\n')
        (bin_dir / name).chmod(0o755)

    def run(**state) -> list[str]:
        log.write_text("")
        for command in commands:
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                                  env={"PATH": f"{bin_dir}:/usr/bin:/bin", **state})
            assert done.returncode == 0, (command, done.stderr)
        return [line for line in log.read_text().splitlines() if not line.startswith(("sudo", "lsblk"))]

    assert run() == [f"chown 1000:100 {host}", "blkid /dev/nvme1n1", "mkfs.ext4 -q /dev/nvme1n1",
                     f"mountpoint -q {host}", f"mount /dev/nvme1n1 {host}", f"chown 1000:100 {host}"]
    assert host.is_dir()
    kept = run(FORMATTED="1", MOUNTED="1")  # a node rebooted: its data stays, mounted once
    assert not any(c.startswith(("mkfs", "mount ")) for c in kept) and f"chown 1000:100 {host}" in kept
