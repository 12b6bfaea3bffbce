"""Read-only root filesystems: every container the operator renders runs with one, and what its
process still writes goes to an emptyDir, through the environment below (docs/security.md).

What the engine process writes at run time (read off engine/, kernels/ and what they import, and
checked by tracing `llmop serve` on the CPU with worker processes, docs/security.md):

  /tmp      TMPDIR: `tempfile` — the tensor-parallel rendezvous directory (engine/tp/multiproc.py),
            TorchInductor's cache directory (a worker's torch creates it, empty: nothing is
            compiled), Triton's scratch directory when it builds its launcher
  $HOME     caches that default under it, pinned there by name in case an image points them
            elsewhere: Triton's compiled kernels (TRITON_CACHE_DIR), the CUDA driver's JIT cache
            (CUDA_CACHE_PATH), XDG_CACHE_HOME (Hugging Face hub, torch hub)
  /dev/shm  NCCL between tensor-parallel ranks and multiprocessing's semaphores: a memory-backed
            emptyDir of its own (pod.py)

No bytecode is written (PYTHONDONTWRITEBYTECODE): the image's packages are compiled when it is
built, and a read-only site-packages would only make each write fail. The init containers that
download sources (sources.py) get the same environment, with their HOME on the models volume.
"""

from __future__ import annotations

from typing import Any

TMP_DIR = "/tmp"
TMP_VOLUME = "tmp"
ENGINE_HOME = "/home/llmop"  # Dockerfile.engine's user's home
HOME_VOLUME = "home"


def security_context() -> dict[str, Any]:
    """Every container's: a read-only root, no privilege escalation, no capabilities (the pod's
    securityContext adds non-root and seccomp)."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def env(home: str) -> list[dict[str, str]]:
    """The environment that keeps a process's writes in /tmp and in `home` (both emptyDirs)."""
    values = {
        "HOME": home,
        "TMPDIR": TMP_DIR,
        "XDG_CACHE_HOME": f"{home}/.cache",
        "TRITON_CACHE_DIR": f"{home}/.triton/cache",
        "CUDA_CACHE_PATH": f"{home}/.nv/ComputeCache",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def tmp_mount() -> dict[str, Any]:
    return {"name": TMP_VOLUME, "mountPath": TMP_DIR}


def engine_mounts() -> list[dict[str, Any]]:
    """The engine container's writable directories: /tmp and its HOME."""
    return [tmp_mount(), {"name": HOME_VOLUME, "mountPath": ENGINE_HOME}]


def volumes() -> list[dict[str, Any]]:
    """The pod's emptyDirs behind them."""
    return [{"name": TMP_VOLUME, "emptyDir": {}}, {"name": HOME_VOLUME, "emptyDir": {}}]
