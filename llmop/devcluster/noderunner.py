"""The thin shell that runs the real node described in `realnode`: bridge, containerd, kubelet,
kube-proxy, and the images the pods need; and stops all of it, containers included.

Why it attaches to a running plane rather than being part of `up`: only the tests and the demo
that run real pods pay for it (root, Debian's containerd/runc/CNI plugins, image builds); the
rest of the suite keeps its fast kwok-only plane. Once started it lives as long as the plane:
`runner.down` stops it first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from . import components, images, pki, plane, realnode, runner
from .plane import Layout, Ports
from .realnode import NodeLayout, NodePorts

NODE_PROCESSES = ("containerd", "kubelet", "kube-proxy", "apiserver-forward")
START_TIMEOUT_S = 240.0


class NodeUnavailable(RuntimeError):
    """This machine cannot run the real node; the message says what is missing."""


def prerequisites() -> list[str]:
    """What stops the real node here (empty when it can run)."""
    missing = [f"`{t}` (Debian packages: containerd runc containernetworking-plugins buildah "
               f"debootstrap iptables; `make system-deps`)" for t in images.tools_missing()]  # fmt: skip
    if not (realnode.CNI_BIN_DIR / "bridge").exists():
        missing.append(f"{realnode.CNI_BIN_DIR}/bridge (Debian package containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root (the kubelet and containerd manage cgroups, mounts and network namespaces)")
    return missing


def node_layout(layout: Layout) -> NodeLayout:
    return NodeLayout(layout.state_dir)


def _procs(layout: Layout, node: NodeLayout, ports: Ports) -> dict[str, plane.Process]:
    return {
        "containerd": plane.Process("containerd", shutil.which("containerd") or "containerd",
                                    ["--config", str(node.containerd_config)]),
        "kubelet": plane.Process("kubelet", "kubelet",
                                 realnode.kubelet_args(node, layout.component_kubeconfig("kubelet"))),
        "kube-proxy": plane.Process("kube-proxy", "kube-proxy", realnode.proxy_args(node)),
        "apiserver-forward": plane.Process("apiserver-forward", sys.executable,
                                           realnode.apiserver_forward_args(ports.apiserver)),
    }  # fmt: skip


def running(layout: Layout) -> bool:
    return all(runner._alive(layout.pids / n) is not None for n in NODE_PROCESSES)


def _node_ready(layout: Layout, ports: Ports) -> bool:
    status, body = runner.api(layout, ports, f"/api/v1/nodes/{realnode.NODE_NAME}")
    return status == 200 and isinstance(body, dict) and plane.node_is_schedulable(body)


def _unmount_under(root: Path) -> None:
    """Lazily unmount everything below `root`, deepest first (pod volumes, rootfs, netns)."""
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1].replace("\\040", " ") for line in fh]
    prefix = str(root) + "/"
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _shim_pids(node: NodeLayout) -> list[int]:
    """containerd-shim processes of this node's containerd (they outlive it by design)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            if cmd and b"containerd-shim" in cmd[0] and str(node.containerd_socket).encode() in cmd:
                pids.append(int(entry.name))
    return pids


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def stop(layout: Layout) -> list[str]:
    """Stop kube-proxy and the kubelet, kill every container of this node, stop containerd,
    and release mounts; images stay in containerd's root for the next start."""
    node = node_layout(layout)
    stopped = []
    for name in ("apiserver-forward", "kube-proxy", "kubelet"):
        if runner._stop_one(layout.pids / name):
            stopped.append(name)
    for shim in _shim_pids(node):
        for pid in reversed(_descendants(shim)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if runner._stop_one(layout.pids / "containerd"):
        stopped.append("containerd")
    _unmount_under(node.root)
    shutil.rmtree(node.containerd_state, ignore_errors=True)
    shutil.rmtree(node.kubelet_dir, ignore_errors=True)
    shutil.rmtree(node.cni_ipam_dir, ignore_errors=True)
    subprocess.run(["ip", "link", "del", realnode.BRIDGE], capture_output=True)
    return stopped


def _write_configs(layout: Layout, node: NodeLayout, ports: NodePorts) -> None:
    for d in (node.root, node.cni_conf_dir, node.cni_ipam_dir, node.kubelet_dir, node.pod_logs):
        d.mkdir(parents=True, exist_ok=True)
    node.containerd_config.write_text(realnode.containerd_config(node))
    (node.cni_conf_dir / "10-llmop.conflist").write_text(realnode.cni_conflist(node))
    node.kubelet_config.write_text(yaml.safe_dump(realnode.kubelet_config(node, ports, layout.pki / "ca.crt")))
    node.proxy_config.write_text(yaml.safe_dump(realnode.proxy_config(layout.component_kubeconfig("kube-proxy"), ports)))


def start(layout: Layout, ports: Ports = Ports(), node_ports: NodePorts = NodePorts(),
          log: Callable[[str], None] = print) -> float:
    """Start the node on the running plane; returns seconds until it is Ready. Idempotent."""
    missing = prerequisites()
    if missing:
        raise NodeUnavailable("the real node needs: " + "; ".join(missing))
    if running(layout) and _node_ready(layout, ports):
        _put_apiserver_endpoint(layout, ports)  # idempotent: restores a deleted slice
        return 0.0
    t0 = time.monotonic()
    stop(layout)
    components.build(log=log, optional=True)
    node = node_layout(layout)
    pki.ensure_pki(layout.pki, plane.SERVICE_IP)  # a plane started before the node existed lacks its certs
    runner._write_kubeconfigs(layout, ports)
    _write_configs(layout, node, node_ports)
    for cmd in realnode.bridge_commands():
        subprocess.run(cmd, capture_output=True)  # "exists" on a second start is fine
    for obj in realnode.node_rbac():
        status, body = runner.api(layout, ports, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "POST", obj)
        if status not in (201, 409):
            raise runner.ClusterError(f"creating {obj['metadata']['name']}: HTTP {status}: {body}")
    procs = _procs(layout, node, ports)
    deadline = t0 + START_TIMEOUT_S
    runner._spawn(layout, procs["containerd"])
    runner._wait("containerd's socket", lambda: subprocess.run(
        ["ctr", "--address", str(node.containerd_socket), "version"], capture_output=True).returncode == 0,
        layout, ["containerd"], deadline)  # fmt: skip
    images.load_into_containerd(node.containerd_socket, images.ensure_pause(log), log)
    runner._spawn(layout, procs["kubelet"])
    runner._spawn(layout, procs["kube-proxy"])
    runner._spawn(layout, procs["apiserver-forward"])
    _put_apiserver_endpoint(layout, ports)
    healthz = f"http://127.0.0.1:{node_ports.kubelet_healthz}/healthz"
    # The kubelet's own healthz first: a Node object can still say Ready from a previous run.
    runner._wait(f"node {realnode.NODE_NAME} Ready",
                 lambda: runner._http(healthz)[0] == 200 and _node_ready(layout, ports),
                 layout, list(NODE_PROCESSES), deadline)  # fmt: skip
    seconds = time.monotonic() - t0
    log(f"real node {realnode.NODE_NAME} Ready in {seconds:.1f}s (pods on {realnode.POD_CIDR})")
    return seconds


def _put_apiserver_endpoint(layout: Layout, ports: Ports) -> None:
    slice_ = realnode.apiserver_endpoint_slice(ports.apiserver)
    path = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    status, body = runner.api(layout, ports, path, "POST", slice_)
    if status == 409:
        status, body = runner.api(layout, ports, f"{path}/{slice_['metadata']['name']}", "PUT", slice_)
    if status not in (200, 201):
        raise runner.ClusterError(f"the kubernetes Service's endpoint: HTTP {status}: {body}")


def load_image(layout: Layout, spec: images.ImageSpec, log: Callable[[str], None] = print) -> str:
    """Build (if needed) one of the project's images and put it in the node's containerd."""
    ref = images.ensure_built(spec, log)
    socket = node_layout(layout).containerd_socket
    images.load_into_containerd(socket, images.ensure_pause(log), log)  # every pod's sandbox
    images.load_into_containerd(socket, ref, log)
    images.prune(socket, spec, keep=ref)
    return ref
