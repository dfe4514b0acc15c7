"""Stand-in for nvidia-ml-py's `pynvml` in tests (this folder first on PYTHONPATH): the GPUs
$STANDIN_GPUS names, comma-separated ("NVIDIA H200,NVIDIA H200"), each with the
utilization (percent) the file $STANDIN_GPU_UTIL holds, read at every call so that a test
can change it (0 without the file), and held by one process where that file exists (none
without it). Without $STANDIN_GPUS it answers as NVML does on a machine without a
driver: nvmlInit fails."""

import os
from collections import namedtuple


class NVMLError(Exception):
    pass


Utilization = namedtuple("Utilization", "gpu memory")


def _names() -> list[str]:
    return [n for n in os.environ.get("STANDIN_GPUS", "").split(",") if n]


def nvmlInit():
    if not _names():
        raise NVMLError("Driver Not Loaded")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount() -> int:
    return len(_names())


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < len(_names()):
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return _names()[handle]


def nvmlDeviceGetUUID(handle: int) -> str:
    return f"GPU-standin-{handle:04d}"


def nvmlDeviceGetUtilizationRates(handle: int) -> Utilization:
    path = os.environ.get("STANDIN_GPU_UTIL")
    busy = int(open(path).read().strip() or 0) if path and os.path.exists(path) else 0
    return Utilization(gpu=busy, memory=0)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list:
    path = os.environ.get("STANDIN_GPU_UTIL")
    return [namedtuple("Process", "pid usedGpuMemory")(pid=1, usedGpuMemory=0)] if path and os.path.exists(path) else []
