"""The `ray` CLI run against a cluster's rendered config (`ray up`, `ray down`, `ray exec`),
and the credentials it needs, checked first: one line, not boto3's traceback."""

import signal
import subprocess

from scripts.core.errors import KitError, NoAccount, short
from scripts.core.ray_cli import ray_cli, ray_env
from scripts.providers.aws.preflight import NO_CREDENTIALS


READY_POLL_S = 10


def require_credentials() -> None:
    """Fail with one line before `ray up`/`ray down` would fail with a traceback."""
    import boto3
    import botocore.exceptions

    try:
        found = boto3.Session().get_credentials()
    except botocore.exceptions.BotoCoreError as e:
        raise KitError(f"AWS credentials: {short(str(e), 120)}; fix your AWS configuration") from None
    if found is None:
        raise NoAccount(NO_CREDENTIALS)


def run_ray(args: list[str], keep_output: bool = False):
    """A `ray` command in a session of its own: the terminal's Ctrl-C reaches the kit,
    which decides (an interrupted `ray up` is stopped; `ray down` is let finish). Its exit
    code; with keep_output, (code, its output), echoed as it comes."""
    proc = subprocess.Popen([ray_cli(), *args], env=ray_env(), start_new_session=True,
                            **({"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT,
                                "text": True} if keep_output else {}))
    try:
        if not keep_output:
            return proc.wait()
        lines = []
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines = (lines + [line])[-500:]  # the tail is where `ray up` says why it failed
        return proc.wait(), "".join(lines)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
