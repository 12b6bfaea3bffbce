"""The real node's configuration as pure data (llmop.devcluster.realnode / images): what the
kubelet, containerd, the CNI bridge and kube-proxy are told, and how image tags follow content."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from llmop.devcluster import images, plane, realnode


def test_everything_listens_on_loopback_or_the_bridge_and_keeps_off_the_system_containerd(tmp_path):
    node = realnode.NodeLayout(tmp_path)
    kubelet = realnode.kubelet_config(node, realnode.NodePorts(), tmp_path / "ca.crt")
    assert kubelet["address"] == realnode.GATEWAY and kubelet["healthzBindAddress"] == "127.0.0.1"
    assert kubelet["readOnlyPort"] == 0
    assert kubelet["imageGCHighThresholdPercent"] == 100  # local images (pause included) are never pulled back
    # Pods share the bridge with the kubelet's API: nobody anonymous, everyone authorized by the API server.
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert kubelet["authorization"]["mode"] == "Webhook"
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"
    assert str(node.containerd_socket).startswith(str(tmp_path))  # never /run/containerd
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    proxy = realnode.proxy_config(tmp_path / "kc", realnode.NodePorts())
    assert proxy["bindAddress"] == "127.0.0.1"
    assert proxy["healthzBindAddress"].startswith("127.0.0.1:") and proxy["metricsBindAddress"].startswith("127.0.0.1:")
    assert proxy["conntrack"]["maxPerCore"] == 0  # leaves the host's sysctls alone
    toml = realnode.containerd_config(node)
    assert f'address = "{node.containerd_socket}"' in toml and "SystemdCgroup = false" in toml
    assert f'sandbox_image = "{realnode.PAUSE_IMAGE}"' in toml
    assert "restrict_oom_score_adj = true" in toml  # root without CAP_SYS_RESOURCE can run pods
    assert f'conf_dir = "{node.cni_conf_dir}"' in toml
    forward = realnode.apiserver_forward_args(16443)
    assert forward[forward.index("--listen") + 1] == f"{realnode.GATEWAY}:16443"
    assert forward[forward.index("--to") + 1] == "127.0.0.1:16443"


def test_pods_reach_the_api_server_through_the_kubernetes_service():
    slice_ = realnode.apiserver_endpoint_slice(16443)
    assert slice_["metadata"]["namespace"] == "default"
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kubernetes"
    assert slice_["endpoints"][0]["addresses"] == [realnode.GATEWAY]  # where the forwarder listens
    assert slice_["ports"] == [{"name": "https", "port": 16443, "protocol": "TCP"}]


def test_pods_get_addresses_on_the_bridge_the_host_routes_services_through(tmp_path):
    conf = json.loads(realnode.cni_conflist(realnode.NodeLayout(tmp_path)))
    bridge = conf["plugins"][0]
    assert bridge["bridge"] == realnode.BRIDGE and bridge["isGateway"]
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": realnode.POD_CIDR, "gateway": realnode.GATEWAY}
    route = realnode.bridge_commands()[-1]
    assert route[:4] == ["ip", "route", "replace", plane.SERVICE_CIDR] and realnode.BRIDGE in route
    assert realnode.proxy_config(tmp_path, realnode.NodePorts())["clusterCIDR"] == realnode.POD_CIDR


def test_node_processes_are_bound_to_their_bootstrap_roles():
    roles = {b["roleRef"]["name"]: b["subjects"][0]["name"] for b in realnode.node_rbac()}
    assert roles == {"system:node": f"system:node:{realnode.NODE_NAME}", "system:node-proxier": "system:kube-proxy"}


def test_gpu_nodes_are_tainted_so_only_gpu_pods_land_there():
    nodes = {n.name: plane.node_manifest(n) for n in plane.default_nodes()}
    for name, node in nodes.items():
        (taint,) = node["spec"]["taints"]
        gpu = "nvidia.com/gpu" in node["status"]["capacity"]
        assert taint == (plane.GPU_TAINT if gpu else plane.FAKE_CPU_TAINT), name
    assert "--enable-admission-plugins=ExtendedResourceToleration" in plane.apiserver_args(
        plane.Layout(Path("/s")), plane.Ports())


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "Dockerfile.engine").write_text("FROM x\n")
    (root / "engine").mkdir()
    (root / "engine" / "app.py").write_text("print(1)\n")
    (root / "notes.md").write_text("not copied into the image\n")
    (root / ".dockerignore").write_text(".venv\n**/__pycache__\n")
    (root / ".gitignore").write_text("scratch.txt\n")
    (root / "scratch.txt").write_text("ignored by git\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def test_image_tags_follow_the_context_content_and_the_base(tmp_path):
    root = _repo(tmp_path)
    tag = images.content_tag(images.ENGINE, "base:1", root)
    assert images.content_tag(images.ENGINE, "base:1", root) == tag
    (root / "scratch.txt").write_text("changed, but git ignores it\n")
    (root / "engine" / "__pycache__").mkdir()
    (root / "engine" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert images.content_tag(images.ENGINE, "base:1", root) == tag
    assert images.content_tag(images.ENGINE, "base:2", root) != tag
    assert images.content_tag(images.OPERATOR, "base:1", root) != tag
    (root / "notes.md").write_text("changed, but not in the image\n")
    assert images.content_tag(images.ENGINE, "base:1", root) == tag
    (root / "engine" / "app.py").write_text("print(2)\n")
    assert images.content_tag(images.ENGINE, "base:1", root) != tag
    assert images.image_ref(images.ENGINE, "base:1", root).startswith("localhost/llmop/engine:")
