"""The dev cluster's one real node, as data: containerd's config, the CNI network, the kubelet's
and kube-proxy's configs and command lines. No I/O here — `noderunner` executes it.

Why a real node beside the kwok ones: kwok nodes mark pods Running without a process, so nothing
the operator deploys would ever run. This node is this machine: containerd + runc start the
containers, a CNI bridge gives pods addresses the host reaches, kube-proxy makes Services work.
The kwok GPU nodes stay (GPU scheduling is still tested on them); they carry the usual
`nvidia.com/gpu` taint, so only pods that request GPUs (tolerated automatically by the
ExtendedResourceToleration admission plugin) go there, and everything else lands here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .plane import SERVICE_CIDR

NODE_NAME = "llmop-node-0"
BRIDGE = "llmop0"
POD_CIDR = "10.89.0.0/24"
GATEWAY = "10.89.0.1"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
K8S_NAMESPACE = "k8s.io"  # containerd namespace the CRI plugin uses
PAUSE_IMAGE = "localhost/llmop/pause:3.10"


@dataclass(frozen=True)
class NodePorts:
    """Loopback ports of the node's processes, beside the plane's 162xx."""

    kubelet: int = 16250
    kubelet_healthz: int = 16248
    proxy_healthz: int = 16256
    proxy_metrics: int = 16249


@dataclass(frozen=True)
class NodeLayout:
    """The node's state, under the plane's state directory. containerd's root (images) is kept
    across `down`/`up`; its state directory (sockets, running tasks) is not."""

    state_dir: Path

    @property
    def root(self) -> Path:
        return self.state_dir / "node"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd-root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd-state"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"


def containerd_config(layout: NodeLayout) -> str:
    """containerd 1.6 (Debian's) config, version 2: its own root, state and socket (never the
    system's /run/containerd), cgroupfs, the locally built pause image, our CNI directory."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        "version = 2",
        f'root = "{layout.containerd_root}"',
        f'state = "{layout.containerd_state}"',
        "[grpc]",
        f'  address = "{layout.containerd_socket}"',
        "[ttrpc]",
        f'  address = "{layout.containerd_socket}.ttrpc"',
        "[debug]",
        '  level = "warn"',
        "[metrics]",
        '  address = ""',
        f"[{cri}]",
        f'  sandbox_image = "{PAUSE_IMAGE}"',
        # Sandboxes get oom_score_adj -998, which needs CAP_SYS_RESOURCE; machines whose root lacks
        # it (this build machine) fail every pod with "can't get final child's PID from pipe".
        "  restrict_oom_score_adj = true",
        '  stream_server_address = "127.0.0.1"',
        "  enable_cdi = false",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"[{cri}.cni]",
        f'  bin_dir = "{CNI_BIN_DIR}"',
        f'  conf_dir = "{layout.cni_conf_dir}"',
        "",
    ])  # fmt: skip


def cni_conflist(layout: NodeLayout) -> str:
    """A bridge with host-local addresses; the host is the gateway, so it reaches every pod."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "llmop",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(layout.cni_ipam_dir),
                      "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2)  # fmt: skip


def kubelet_config(layout: NodeLayout, ports: NodePorts, client_ca: Path) -> dict:
    """KubeletConfiguration: its API on the bridge's address (the node's InternalIP: a node IP
    may not be loopback), healthz on loopback; cgroup v1 allowed (this machine has it); swap and
    eviction thresholds relaxed for a shared development machine. Pods share the bridge, so the
    API authenticates clients by the cluster CA and asks the API server what they may do, like
    any production kubelet; nobody anonymous gets in."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": GATEWAY,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "podLogsDir": str(layout.pod_logs),
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "maxPods": 32,
        "serializeImagePulls": False,
        # No image garbage collection: every image here is built locally and cannot be pulled back,
        # and the pause image is not pinned by containerd 1.6. On a shared disk the kubelet's GC
        # removed the pause image between tests and every new pod failed to get a sandbox.
        # `images.prune` drops our own stale builds instead.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "protectKernelDefaults": False,
        "registerNode": True,
        "nodeStatusReportFrequency": "10s",
    }


def kubelet_args(layout: NodeLayout, kubeconfig: Path) -> list[str]:
    return [
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--cert-dir={layout.kubelet_dir / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={GATEWAY}",
        "--node-labels=type=real,node.kubernetes.io/instance-type=host",
        "--v=1",
    ]


def proxy_config(kubeconfig: Path, ports: NodePorts) -> dict:
    """KubeProxyConfiguration: iptables mode; conntrack sysctls left alone (maxPerCore 0)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": f"127.0.0.1:{ports.proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{ports.proxy_metrics}",
        "conntrack": {"maxPerCore": 0},
        "iptables": {"localhostNodePorts": False},
    }


def proxy_args(layout: NodeLayout) -> list[str]:
    return [f"--config={layout.proxy_config}", "--v=1"]


def bridge_commands() -> list[list[str]]:
    """The bridge, made before the first pod so the host can route the Service range through it:
    a host process connecting to a ClusterIP needs a route before kube-proxy's DNAT applies."""
    return [
        ["ip", "link", "add", BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE],
        ["ip", "link", "set", BRIDGE, "up"],
        ["ip", "route", "replace", SERVICE_CIDR, "dev", BRIDGE, "src", GATEWAY],
    ]


def apiserver_forward_args(apiserver_port: int) -> list[str]:
    """`llmop.devcluster.forward` from the bridge's gateway to the loopback API server (why: its
    docstring); run by this venv's Python."""
    return ["-P", "-m", "llmop.devcluster.forward",
            "--listen", f"{GATEWAY}:{apiserver_port}", "--to", f"127.0.0.1:{apiserver_port}"]  # fmt: skip


def apiserver_endpoint_slice(apiserver_port: int) -> dict:
    """The `kubernetes` Service's endpoint: the forwarder on the gateway. The plane runs the API
    server with `--endpoint-reconciler-type=none` (loopback may not be an endpoint), so this
    slice is the only one and nothing rewrites it; kube-proxy routes 10.96.0.1:443 to it, which is
    where in-cluster clients (the operator's pod) look for the API server."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes-llmop-node", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes",
                                "endpointslice.kubernetes.io/managed-by": "llmop-devcluster"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [GATEWAY], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": apiserver_port, "protocol": "TCP"}],
    }  # fmt: skip


def node_rbac() -> list[dict]:
    """Bind the bootstrap roles the node's processes need (the plane authorizes with RBAC only)."""

    def binding(name: str, role: str, user: str) -> dict:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }

    return [
        binding("llmop-dev:node", "system:node", f"system:node:{NODE_NAME}"),
        binding("llmop-dev:node-proxier", "system:node-proxier", "system:kube-proxy"),
    ]
