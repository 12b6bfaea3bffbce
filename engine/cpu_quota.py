"""The CPUs this process may use: its affinity mask, and its container's CPU limit (CFS quota).

Why: torch sizes its thread pool from the cores OpenMP sees, which is the affinity mask, not the
CFS quota a Kubernetes CPU limit sets. An engine pod limited to 2 CPUs on a 64-core node would run
64 OpenMP threads that the kernel throttles to 2 CPUs' worth of time, and OpenMP threads that wait
for a throttled sibling make every matmul slow. `llmop serve` sizes its threads from
`cpu_budget()` instead (`device_caps.serving_threads`).

cgroup v2 writes the limit as `cpu.max` ("<quota> <period>" or "max <period>"), cgroup v1 as
`cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us`. In a container the cgroup is usually
mounted as the root of /sys/fs/cgroup; outside one (or without a cgroup namespace) the process's
own cgroup is the path /proc/self/cgroup names, and a limit may sit on any cgroup above it (a pod's,
a systemd slice's). The root and every cgroup on that path are read; the smallest limit wins.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_CPU_DIRS = ("cpu,cpuacct", "cpu", "cpuacct,cpu")


def parse_cpu_max(text: str) -> float | None:
    """CPUs of a cgroup v2 `cpu.max` line; None when unlimited or unreadable."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs of cgroup v1's `cpu.cfs_quota_us` and `cpu.cfs_period_us`; None when unlimited (-1)."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_paths(proc_self_cgroup: str) -> dict[str, str]:
    """The process's cgroup path per hierarchy from /proc/self/cgroup text: "" for cgroup v2's
    unified one, each controller's name (cpu, cpuacct, ...) for v1's."""
    out: dict[str, str] = {}
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out[""] = path
        for c in controllers.split(","):
            if c:
                out[c] = path
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _ancestors(path: str) -> list[str]:
    """The root ("") and every cgroup on `path` down to it: "/a/b" gives "", "a", "a/b"."""
    parts = [p for p in path.split("/") if p]
    return [""] + ["/".join(parts[: i + 1]) for i in range(len(parts))]


def quota_cpus(root: Path = CGROUP_ROOT, proc_self_cgroup: str | None = None) -> float | None:
    """The smallest CPU limit among the cgroup files that apply to this process; None: no limit."""
    if proc_self_cgroup is None:
        proc_self_cgroup = _read(Path("/proc/self/cgroup")) or ""
    paths = cgroup_paths(proc_self_cgroup)
    limits: list[float] = []
    for sub in _ancestors(paths.get("", "")):
        text = _read(root / sub / "cpu.max")
        if text is not None and (cpus := parse_cpu_max(text)) is not None:
            limits.append(cpus)
    for mount in _V1_CPU_DIRS:
        for sub in _ancestors(paths.get("cpu", "")):
            d = root / mount / sub
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            if quota is not None and period is not None and (cpus := parse_cfs(quota, period)) is not None:
                limits.append(cpus)
    return min(limits) if limits else None


def cpu_budget(affinity: int | None = None, quota: float | None = None) -> int:
    """Whole CPUs this process may keep busy: its affinity mask's size, capped by the CFS quota
    (rounded up: a 1.5-CPU limit keeps two threads partly busy rather than leave half a CPU idle)."""
    cores = affinity if affinity is not None else len(os.sched_getaffinity(0))
    return max(1, min(cores, math.ceil(quota))) if quota is not None else max(1, cores)
