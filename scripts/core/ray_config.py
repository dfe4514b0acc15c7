"""Ray's own checks of a Ray autoscaler config, exactly as `ray up` runs them: the AWS and
local providers' configs are such configs (KubeRay's RayCluster is not: providers/kuberay/crd.py)."""

import copy
import logging


def schema_problems(config: dict) -> list[str]:
    """Ray's own checks, exactly as `ray up` runs them (defaults filled in first)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    ray_logger = logging.getLogger("ray.autoscaler")
    level = ray_logger.level
    ray_logger.setLevel(logging.ERROR)  # its notes on filled-in defaults are noise here
    try:
        validate_config(prepare_config(copy.deepcopy(config)))
    except Exception as e:  # jsonschema.ValidationError, ValueError: Ray's own messages
        return [f"Ray rejects the config: {str(e).splitlines()[0]}"]
    finally:
        ray_logger.setLevel(level)
    return []
