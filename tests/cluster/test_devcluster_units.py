"""The dev cluster's pure parts, without processes, files or network."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from llmop.devcluster import components, plane

LAYOUT = plane.Layout(Path("/state"))
PORTS = plane.Ports()


def test_ports_are_distinct_and_clear_of_engine_and_real_cluster_defaults():
    ports = list(PORTS.all().values())
    assert len(set(ports)) == len(ports)
    assert not set(ports) & {8000, 6443, 2379, 2380, 10250, 10257, 10259}


def _addresses(args: list[str]) -> list[str]:
    """Every host named in an address-like flag."""
    hosts = []
    for arg in args:
        if "=" not in arg:
            continue
        flag, value = arg.split("=", 1)
        if flag.endswith(("address", "urls", "servers")) or flag == "--initial-cluster":
            for part in value.split(","):
                part = part.split("=", 1)[-1]
                host = part.split("://", 1)[-1].rsplit(":", 1)[0] if ":" in part else part
                hosts.append(host)
    return hosts


@pytest.mark.parametrize("proc", plane.processes(LAYOUT, PORTS), ids=lambda p: p.name)
def test_every_process_binds_loopback_only(proc):
    hosts = _addresses(proc.args)
    assert hosts, f"{proc.name} names no address"
    assert all(ipaddress.ip_address(h).is_loopback for h in hosts), hosts


def test_apiserver_flags_enable_rbac_and_service_accounts():
    args = plane.apiserver_args(LAYOUT, PORTS)
    assert "--authorization-mode=RBAC" in args
    assert f"--secure-port={PORTS.apiserver}" in args
    assert any(a.startswith("--service-account-signing-key-file=/state/pki/") for a in args)
    assert f"--etcd-servers=http://127.0.0.1:{PORTS.etcd_client}" in args


def test_controller_manager_runs_all_default_controllers_without_leader_election():
    args = plane.controller_manager_args(LAYOUT, PORTS)
    assert "--controllers=*" in args and "--leader-elect=false" in args


def test_etcd_data_is_throwaway():
    args = plane.etcd_args(LAYOUT, PORTS)
    assert "--unsafe-no-fsync" in args
    assert f"--data-dir={LAYOUT.etcd_data}" in args


def test_default_nodes_two_8_gpu_nodes_and_one_cpu_node():
    manifests = [plane.node_manifest(s) for s in plane.default_nodes()]
    gpus = [m["status"]["capacity"].get("nvidia.com/gpu") for m in manifests]
    assert sorted(gpus, key=str) == ["8", "8", None]
    for m in manifests:
        assert m["status"]["allocatable"] == m["status"]["capacity"]
        assert m["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        assert m["metadata"]["labels"]["kubernetes.io/hostname"] == m["metadata"]["name"]


def test_gpu_node_carries_feature_discovery_labels():
    spec = plane.NodeSpec("g", gpus=8)
    labels = plane.node_manifest(spec)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert int(labels["nvidia.com/gpu.memory"]) // 1024 == 79  # 80 GB class, in MiB like GFD
    cpu_labels = plane.node_manifest(plane.NodeSpec("c"))["metadata"]["labels"]
    assert not any(k.startswith("nvidia.com/") for k in cpu_labels)


@pytest.mark.parametrize(
    "conditions, taints, expected",
    [
        ([{"type": "Ready", "status": "True"}], [], True),
        ([{"type": "Ready", "status": "False"}], [], False),
        ([], [], False),
        ([{"type": "Ready", "status": "True"}], [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], False),
        ([{"type": "Ready", "status": "True"}], [{"key": "example.com/other", "effect": "NoSchedule"}], True),
    ],
)
def test_node_is_schedulable(conditions, taints, expected):
    node = {"spec": {"taints": taints}, "status": {"conditions": conditions}}
    assert plane.node_is_schedulable(node) is expected


def test_kubeconfig_is_self_contained():
    cfg = plane.kubeconfig("https://127.0.0.1:1", b"CA", b"CERT", b"KEY", "me")
    assert cfg["current-context"] == plane.CLUSTER_NAME
    assert cfg["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:1", "certificate-authority-data": "Q0E="}
    assert cfg["users"][0]["user"]["client-key-data"] == "S0VZ"


def test_kwok_stage_documents_are_one_multi_document_yaml():
    import yaml

    text = plane.kwok_stage_documents(["kind: Stage\nmetadata: {name: a}\n", "kind: Stage\nmetadata: {name: b}"])
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(text)] == ["a", "b"]


def test_build_command_is_static_trimmed_and_version_stamped(tmp_path):
    kube = next(c for c in components.COMPONENTS if c.name == "kubernetes")
    cmd = components.build_command(kube, tmp_path)
    assert cmd[:2] == ["go", "build"] and "-trimpath" in cmd
    assert cmd[cmd.index("-tags") + 1] == "selinux,notest"
    ldflags = cmd[cmd.index("-ldflags") + 1]
    assert ldflags.startswith("-s -w ")
    assert f"k8s.io/component-base/version.gitVersion={components.KUBERNETES_VERSION}" in ldflags
    # all four binaries in one call, so shared packages compile once
    assert kube.binaries == ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    assert cmd[-4:] == list(kube.packages)
    assert components.go_env(tmp_path)["CGO_ENABLED"] == "0"


def test_wrapper_module_replaces_every_staging_module_with_the_pinned_release():
    gomod = (components.GOMOD_DIR / "kubernetes" / "go.mod").read_text()
    minor = "v0." + components.KUBERNETES_VERSION.split(".", 1)[1]
    replaces = [line.split() for line in gomod.splitlines() if "=>" in line]
    assert len(replaces) >= 30
    assert all(r[0] == r[2] and r[3] == minor for r in replaces)
    assert f"k8s.io/kubernetes {components.KUBERNETES_VERSION}" in gomod


def test_cache_key_names_component_and_version():
    for c in components.COMPONENTS:
        key = components.cache_key(c)
        assert key.startswith(f"{c.name}-{c.version}-") and len(key.rsplit("-", 1)[1]) == 12


def test_certificates_carry_identity_and_loopback_sans():
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from llmop.devcluster import pki

    ca_cert, ca_key = pki.make_ca()
    dns, ips = pki.serving_sans(plane.SERVICE_IP)
    cert_pem, _ = pki.make_leaf(ca_cert, ca_key, "kube-apiserver", dns_names=dns, ips=ips, server=True)
    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_cert))

    admin = next(c for c in pki.CLIENTS if c.file_stem == "admin")
    client = x509.load_pem_x509_certificate(pki.make_leaf(ca_cert, ca_key, admin.user, admin.groups)[0])
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "llmop-admin"
    assert [a.value for a in client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:masters"]


def test_binary_names_follow_go_naming_and_renames():
    assert components.go_binary_name("go.etcd.io/etcd/server/v3") == "server"
    assert components.go_binary_name("helm.sh/helm/v4/cmd/helm") == "helm"
    names = [b for c in components.COMPONENTS for b in c.binaries]
    assert sorted(names) == sorted(
        ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok", "helm",
         "kubelet", "kube-proxy"])
    assert [c.name for c in components.COMPONENTS if c.optional] == ["kubelet"]


def test_cli_without_a_plane_says_so_and_fails(tmp_path, monkeypatch, capsys):
    """`status` and `kubeconfig` against a state folder where `up` never ran: exit 1, no traceback."""
    from llmop.cli import main

    monkeypatch.setenv("LLMOP_CLUSTER_DIR", str(tmp_path / "cluster"))
    assert main(["dev-cluster", "kubeconfig", "--print"]) == 1
    assert "run `llmop dev-cluster up` first" in capsys.readouterr().err
    assert main(["dev-cluster", "kubeconfig"]) == 1
    assert main(["dev-cluster", "status"]) == 1
    assert "not running" in capsys.readouterr().out
