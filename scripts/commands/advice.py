"""`note:` lines for a values file that is valid but unwise: said by `make validate` and
`make up` before anything launches, never refused (the platform would take it; the user
may mean it). The provider's own (its `value_notes`: a disk dearer than its node, GPUs fed
by too few vCPUs, more local CPUs than cores), then what any platform shares: a
cluster_name another values file uses."""

import yaml

from scripts.core.paths import VALUES_DIRS


def notes(built) -> list[str]:
    return [f"note: {built.cluster}: {line}"
            for line in built.provider.value_notes(built.values) + shared_cluster_name(built)]


def shared_cluster_name(built) -> list[str]:
    """Another values file of the same provider with this cluster_name, where the platform
    knows a cluster by it: one cluster to it (`make up` of the second refuses while the
    first is up)."""
    if not built.provider.SHARES_CLUSTER_NAMES:
        return []
    name, twins = built.values["cluster_name"], []
    for folder in VALUES_DIRS:
        for path in sorted(folder.glob("*.yaml")):
            if path.stem == built.cluster:
                continue
            try:
                other = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(other, dict) and other.get("cluster_name") == name \
                    and other.get("provider") == built.values.get("provider"):
                twins.append(path.stem)
    if twins:
        return [f"cluster_name: {name} is also {', '.join(sorted(set(twins)))}'s: the two are one cluster "
                "to the platform (one `make up` at a time); give this file a name of its own"]
    return []
