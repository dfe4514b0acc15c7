"""A local cluster's autostop watchdog: the clock of scripts/node/autostop.py with the local
provider's teardown (every process carrying the cluster's marker, then its record).
`make up` starts it beside the head when the values file sets autostop_minutes; it carries
the cluster's marker itself, so `make down` stops it with the rest."""

import sys

from scripts.core import state
from scripts.core.errors import KitError
from scripts.node import autostop
from scripts.providers import local


def teardown(cluster: str) -> None:
    try:
        with state.lock(cluster):  # not while a `make down` of it runs
            record = state.load(cluster, {local.NAME: local.RECORD_SCHEMA})
            print(local.down(cluster, record), flush=True)
    except KitError as e:
        print(f"autostop: {e}", flush=True)


def main(argv=None) -> int:
    p = autostop.parser(__doc__.splitlines()[0])
    p.add_argument("--cluster", required=True, help="a local cluster of this checkout")
    a = p.parse_args(argv)
    return autostop.run(a.address, a.minutes, lambda: teardown(a.cluster))


if __name__ == "__main__":
    sys.exit(main())
