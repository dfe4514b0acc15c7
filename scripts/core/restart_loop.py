"""The shell loop that keeps the head's autostop watchdog (scripts/node/autostop.py)
running, written once for the places that start it: AWS's head start commands
(providers/aws/render.py) and KubeRay's watchdog container (providers/kuberay/watchdog.py).
It restarts the command RESTART_S after any exit but its own teardown's (0): a crash or an
out-of-memory kill costs seconds of watching, not the cluster's limits."""

RESTART_S = 10


def restart_loop(command: str) -> str:
    """`command` (shell text the caller built and quoted) run again after any exit but 0."""
    return (f"while :; do {command}; code=$?; [ $code -eq 0 ] && exit 0; "
            f'echo "autostop: the watchdog exited ($code); restarting in {RESTART_S} s"; '
            f"sleep {RESTART_S}; done")
