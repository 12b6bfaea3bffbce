"""What the local control plane is, as data: ports, file layout, each process's command line,
the kubeconfigs, the fake nodes and kwok's stages. No I/O here — `runner` executes it.

Why a separate pure module: every decision (which flag, which port, which label) is visible
and unit-testable in one place, and the process-running shell stays small.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_CIDR = "10.96.0.0/12"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
CLUSTER_NAME = "llmop-dev"
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# The fake CPU node runs nothing: real CPU pods belong on the real node (realnode.py).
FAKE_CPU_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Ports:
    """Loopback ports, away from the engine's 8000, the usual 6443/2379/102xx of a real
    cluster on the same host, and each other."""

    apiserver: int = 16443
    etcd_client: int = 16379
    etcd_peer: int = 16380
    controller_manager: int = 16257
    scheduler: int = 16259
    kwok: int = 16247

    def all(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Layout:
    """Where one plane keeps its state: one directory, everything inside it."""

    state_dir: Path

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.state_dir / "etcd-data"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids(self) -> Path:
        return self.state_dir / "pids"

    @property
    def users(self) -> Path:
        """One file per test session using the plane (see runner.acquire/release)."""
        return self.state_dir / "users"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig handed to people and tests."""
        return self.state_dir / "kubeconfig"

    def component_kubeconfig(self, name: str) -> Path:
        return self.state_dir / f"{name}.kubeconfig"

    @property
    def kwok_config(self) -> Path:
        return self.state_dir / "kwok-stages.yaml"

    @property
    def lock(self) -> Path:
        return self.state_dir / "lock"

    @property
    def owner(self) -> Path:
        """Who started the plane: "cli" (left running) or "pytest" (stopped by the last session)."""
        return self.state_dir / "owner"


def server_url(ports: Ports) -> str:
    return f"https://127.0.0.1:{ports.apiserver}"


def etcd_args(layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        "--name=llmop",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=llmop={peer}",
        "--initial-cluster-state=new",
        # Throw-away data: skipping fsync makes every write much cheaper on a shared disk.
        "--unsafe-no-fsync",
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]


def apiserver_args(layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        # Hosts without a default route have no address to advertise otherwise.
        "--advertise-address=127.0.0.1",
        # Endpoints may not hold loopback addresses, so the `kubernetes` Service gets none; the
        # operator and tests reach the API server from the host, never from a (fake) pod.
        "--endpoint-reconciler-type=none",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        # For `kubectl logs/exec` on the real node: the kubelet authenticates this certificate.
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        # Pods that request nvidia.com/gpu tolerate the GPU nodes' taint without saying so, as on
        # managed clusters; everything else stays off the (fake) GPU nodes.
        "--enable-admission-plugins=ExtendedResourceToleration",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_args(layout: Layout, ports: Ports) -> list[str]:
    kc = layout.component_kubeconfig("controller-manager")
    return [
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        # Every default controller: deployment, replicaset, garbage collector, namespace,
        # serviceaccount(-token), node-lifecycle (lifts the not-ready taint), ...
        "--controllers=*",
        f"--root-ca-file={layout.pki / 'ca.crt'}",
        f"--service-account-private-key-file={layout.pki / 'sa.key'}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--cluster-signing-cert-file={layout.pki / 'ca.crt'}",
        f"--cluster-signing-key-file={layout.pki / 'ca.key'}",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_args(layout: Layout, ports: Ports) -> list[str]:
    kc = layout.component_kubeconfig("scheduler")
    return [
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--profiling=false",
        "--v=1",
    ]


def kwok_args(layout: Layout, ports: Ports) -> list[str]:
    key, value = FAKE_NODE_ANNOTATION
    return [
        f"--config={layout.kwok_config}",
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        # Its kubelet-like server (logs/exec); otherwise it would bind 0.0.0.0.
        f"--server-address=127.0.0.1:{ports.kwok}",
        f"--node-port={ports.kwok}",
        "--node-ip=127.0.0.1",
        "--node-lease-duration-seconds=40",
        "--cidr=10.244.0.0/16",
    ]


@dataclass(frozen=True)
class Process:
    """One long-running process of the plane: its binary name and arguments."""

    name: str
    binary: str
    args: list[str] = field(default_factory=list)


def processes(layout: Layout, ports: Ports) -> list[Process]:
    """In start order; `runner` waits for etcd and the API server before starting the rest."""
    return [
        Process("etcd", "etcd", etcd_args(layout, ports)),
        Process("kube-apiserver", "kube-apiserver", apiserver_args(layout, ports)),
        Process("kube-controller-manager", "kube-controller-manager", controller_manager_args(layout, ports)),
        Process("kube-scheduler", "kube-scheduler", scheduler_args(layout, ports)),
        Process("kwok", "kwok", kwok_args(layout, ports)),
    ]


def kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict:
    """A self-contained kubeconfig (certificates inline), one cluster/user/context."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }


# --- fake nodes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUModel:
    """What NVIDIA's GPU feature discovery would label a node with (memory in MiB, as GFD does)."""

    product: str = "NVIDIA-H100-80GB-HBM3"
    memory_mib: int = 81559
    family: str = "hopper"
    compute_major: int = 9
    compute_minor: int = 0
    driver_major: int = 550
    cuda_major: int = 12


@dataclass(frozen=True)
class NodeSpec:
    """A fake node: name, size and (optionally) GPUs."""

    name: str
    cpu: str = "16"
    memory: str = "64Gi"
    gpus: int = 0
    gpu: GPUModel = GPUModel()
    pods: int = 110
    instance_type: str = "cpu-16"


def default_nodes() -> list[NodeSpec]:
    """Two 8-GPU 80 GB nodes (an H100 SXM box's shape) and one CPU-only node."""
    return [
        NodeSpec("llmop-gpu-0", cpu="96", memory="1Ti", gpus=8, instance_type="gpu-8x-h100-80gb"),
        NodeSpec("llmop-gpu-1", cpu="96", memory="1Ti", gpus=8, instance_type="gpu-8x-h100-80gb"),
        NodeSpec("llmop-cpu-0", cpu="16", memory="64Gi", gpus=0, instance_type="cpu-16"),
    ]


def gpu_labels(count: int, gpu: GPUModel) -> dict[str, str]:
    """The labels GPU feature discovery puts on a node with `count` GPUs of model `gpu`."""
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.product": gpu.product,
        "nvidia.com/gpu.memory": str(gpu.memory_mib),
        "nvidia.com/gpu.family": gpu.family,
        "nvidia.com/gpu.compute.major": str(gpu.compute_major),
        "nvidia.com/gpu.compute.minor": str(gpu.compute_minor),
        "nvidia.com/gpu.machine": "DGX-H100",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.driver.major": str(gpu.driver_major),
        "nvidia.com/cuda.runtime.major": str(gpu.cuda_major),
    }


def node_manifest(spec: NodeSpec) -> dict:
    """A Node object kwok will manage. Capacity is set at creation: the API server keeps it,
    and kwok's node-initialize stage copies it into the status it reports."""
    key, value = FAKE_NODE_ANNOTATION
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": spec.instance_type,
        "type": "kwok",
    }
    resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods), "ephemeral-storage": "1Ti"}
    taint = FAKE_CPU_TAINT
    if spec.gpus:
        labels.update(gpu_labels(spec.gpus, spec.gpu))
        resources["nvidia.com/gpu"] = str(spec.gpus)
        taint = GPU_TAINT
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": {key: value}},
        "spec": {"taints": [dict(taint)]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def node_is_schedulable(node: dict) -> bool:
    """Ready=True and none of the not-ready/unreachable taints the node-lifecycle controller manages."""
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = node.get("spec", {}).get("taints") or []
    blocking = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    return ready and not any(t.get("key") in blocking for t in taints)


def kwok_stage_documents(stage_texts: list[str]) -> str:
    """kwok reads one multi-document YAML: join the stage files with document separators."""
    return "\n---\n".join(t.strip() for t in stage_texts) + "\n"
