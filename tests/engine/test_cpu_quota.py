"""The CPUs `llmop serve` sizes its threads by: the affinity mask capped by the cgroup's CPU limit,
read from cgroup v2 and v1 files laid out as a container and a host see them (a temp tree)."""

from pathlib import Path

from llmop.engine.cpu_quota import cgroup_paths, cpu_budget, parse_cfs, parse_cpu_max, quota_cpus

V2_HOST = "0::/kubepods.slice/pod1/cri-abc.scope\n"
V1_HOST = "12:memory:/kubepods/pod1/abc\n5:cpu,cpuacct:/kubepods/pod1/abc\n1:name=systemd:/x\n"


def test_cpu_max_and_cfs_files_parse_to_cpus():
    assert parse_cpu_max("200000 100000\n") == 2.0
    assert parse_cpu_max("150000 100000") == 1.5
    assert parse_cpu_max("max 100000\n") is None
    assert parse_cpu_max("garbage") is None and parse_cpu_max("") is None
    assert parse_cfs("400000\n", "100000\n") == 4.0
    assert parse_cfs("-1\n", "100000\n") is None
    assert parse_cfs("x", "100000") is None


def test_proc_self_cgroup_names_each_hierarchy():
    assert cgroup_paths(V2_HOST) == {"": "/kubepods.slice/pod1/cri-abc.scope"}
    paths = cgroup_paths(V1_HOST)
    assert paths["cpu"] == paths["cpuacct"] == "/kubepods/pod1/abc" and paths["memory"] == "/kubepods/pod1/abc"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v2_limit_in_a_container_and_on_the_host(tmp_path):
    _write(tmp_path / "ns" / "cpu.max", "300000 100000\n")  # a cgroup namespace: the root is the container's
    assert quota_cpus(tmp_path / "ns", "0::/\n") == 3.0
    _write(tmp_path / "host" / "kubepods.slice/pod1/cri-abc.scope" / "cpu.max", "250000 100000\n")
    assert quota_cpus(tmp_path / "host", V2_HOST) == 2.5  # no namespace: the process's own cgroup
    _write(tmp_path / "free" / "cpu.max", "max 100000\n")
    assert quota_cpus(tmp_path / "free", "0::/\n") is None
    assert quota_cpus(tmp_path / "none", "0::/\n") is None  # no cgroup files at all


def test_v1_limit_on_the_process_cgroup(tmp_path):
    d = tmp_path / "cpu,cpuacct"
    _write(d / "cpu.cfs_quota_us", "-1\n")  # the host's root: unlimited
    _write(d / "cpu.cfs_period_us", "100000\n")
    _write(d / "kubepods/pod1/abc" / "cpu.cfs_quota_us", "200000\n")
    _write(d / "kubepods/pod1/abc" / "cpu.cfs_period_us", "100000\n")
    assert quota_cpus(tmp_path, V1_HOST) == 2.0


def test_the_smallest_limit_on_the_path_wins(tmp_path):
    """A limit on a cgroup above the process's (a pod's, a systemd slice's) binds it too."""
    _write(tmp_path / "kubepods.slice/pod1" / "cpu.max", "150000 100000\n")  # the pod: 1.5 CPUs
    _write(tmp_path / "kubepods.slice/pod1/cri-abc.scope" / "cpu.max", "max 100000\n")  # its container: none
    assert quota_cpus(tmp_path, "0::/kubepods.slice/pod1/cri-abc.scope\n") == 1.5
    _write(tmp_path / "kubepods.slice/pod1/cri-abc.scope" / "cpu.max", "100000 100000\n")
    assert quota_cpus(tmp_path, "0::/kubepods.slice/pod1/cri-abc.scope\n") == 1.0


def test_budget_is_the_affinity_capped_by_the_limit_rounded_up():
    assert cpu_budget(affinity=64, quota=2.0) == 2
    assert cpu_budget(affinity=64, quota=1.5) == 2
    assert cpu_budget(affinity=64, quota=0.25) == 1
    assert cpu_budget(affinity=2, quota=8.0) == 2
    assert cpu_budget(affinity=16, quota=None) == 16
