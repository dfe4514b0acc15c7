"""The names the KubeRay package's modules share, each written once."""

NAME = "kuberay"
HEAD_TYPE = "headgroup"  # KubeRay's group name for the head (its pods' ray.io/group label)
DASHBOARD_PORT = 8265  # the head service's dashboard port (KubeRay's default)
LAUNCH_ID = "raykit.dev/launch-id"  # a label on the RayCluster: `down` deletes only that one
