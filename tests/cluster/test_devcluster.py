"""The local control plane behaves like a real cluster: scheduling of GPU requests, controllers,
garbage collection, server-side apply through the pinned kubectl.

Each test works in its own namespace, since other sessions may share the running plane. Waits
poll with a generous deadline only to fail instead of hanging; nothing asserts on durations.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from llmop.devcluster import components

pytestmark = pytest.mark.k8s

WAIT_S = 120


def wait_for(what, fn, timeout=WAIT_S, interval=0.5):
    """Poll fn() until it returns something truthy; return it, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"gave up waiting for {what} (last: {last!r})")


@pytest.fixture
def core(k8s_api):
    from kubernetes import client

    return client.CoreV1Api(k8s_api)


@pytest.fixture
def apps(k8s_api):
    from kubernetes import client

    return client.AppsV1Api(k8s_api)


@pytest.fixture
def namespace(core):
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def gpu_deployment(name: str, gpus: int, replicas: int = 1) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "engine",
                        "image": "registry.invalid/llmop-engine:test",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
                    }],
                },
            },
        },
    }


def pods_of(core, namespace, app):
    return core.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def is_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_startup_time_is_reported(k8s_cluster, record_property, capsys):
    seconds = k8s_cluster.startup_seconds
    record_property("dev_cluster_startup_seconds", seconds)
    with capsys.disabled():
        how = "reused plane, as recorded by its `up`" if k8s_cluster.reused else "started by this session"
        print(f"\n[dev cluster] start-up (warm cache): {seconds}s ({how})")
    assert isinstance(seconds, float) and 0 < seconds < 600, "every `up` records how long it took"
    assert k8s_cluster.kubeconfig.exists()


def test_fake_nodes_are_ready_with_gpu_capacity(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    gpu_nodes = [n for n in nodes.values() if n.status.allocatable.get("nvidia.com/gpu")]
    assert len(gpu_nodes) >= 2
    for node in gpu_nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.metadata.labels["nvidia.com/gpu.product"].startswith("NVIDIA-")
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert any("nvidia.com/gpu" not in (n.status.allocatable or {}) for n in nodes.values())


def test_gpu_deployment_is_scheduled_onto_gpu_nodes_and_ready(core, apps, namespace):
    apps.create_namespaced_deployment(namespace, gpu_deployment("two-gpus", gpus=2, replicas=2))

    def ready_pods():
        pods = pods_of(core, namespace, "two-gpus")
        return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

    pods = wait_for("2 ready pods", ready_pods)
    for pod in pods:
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels.get("nvidia.com/gpu.present") == "true"
        assert pod.status.phase == "Running"
    dep = wait_for("deployment status", lambda: (d := apps.read_namespaced_deployment("two-gpus", namespace))
                   .status.ready_replicas == 2 and d)
    assert dep.status.available_replicas == 2


def test_oversized_gpu_request_stays_pending_with_scheduler_reason(core, apps, namespace):
    apps.create_namespaced_deployment(namespace, gpu_deployment("sixteen-gpus", gpus=16))

    def scheduling_event():
        events = core.list_namespaced_event(namespace).items
        return [e for e in events if e.reason == "FailedScheduling"]

    events = wait_for("a FailedScheduling event", scheduling_event)
    assert any("Insufficient nvidia.com/gpu" in (e.message or "") for e in events), [e.message for e in events]

    def unscheduled_condition():
        (pod,) = pods_of(core, namespace, "sixteen-gpus")
        conds = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        return (pod, conds[0]) if conds else None

    pod, cond = wait_for("the PodScheduled condition", unscheduled_condition)
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    assert (cond.status, cond.reason) == ("False", "Unschedulable")


def test_deleting_an_owner_garbage_collects_its_children(core, apps, namespace):
    from kubernetes import client

    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner")))
    ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="child", owner_references=[ref])))
    # a Deployment's ReplicaSet and pods are children too
    apps.create_namespaced_deployment(namespace, gpu_deployment("cpu-only", gpus=0))
    wait_for("the ReplicaSet", lambda: apps.list_namespaced_replica_set(namespace).items)
    wait_for("the pod", lambda: pods_of(core, namespace, "cpu-only"))

    core.delete_namespaced_config_map("owner", namespace)
    apps.delete_namespaced_deployment("cpu-only", namespace, propagation_policy="Background")

    names = lambda: {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}  # noqa: E731
    wait_for("the child ConfigMap to be collected", lambda: "child" not in names())
    wait_for("the ReplicaSet to be collected", lambda: not apps.list_namespaced_replica_set(namespace).items)
    wait_for("the pod to be collected", lambda: not pods_of(core, namespace, "cpu-only"))


def test_kubectl_server_side_apply_and_get(k8s_cluster, namespace):
    manifest = json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied", "namespace": namespace},
        "data": {"model": "llama-3-8b"},
    })
    out = k8s_cluster.kubectl("apply", "--server-side", "--field-manager=llmop-test", "-f", "-", input=manifest)
    assert "serverside-applied" in out.stdout
    got = json.loads(k8s_cluster.kubectl("get", "configmap", "applied", "-n", namespace, "-o", "json", "--show-managed-fields").stdout)
    assert got["data"] == {"model": "llama-3-8b"}
    assert [m["manager"] for m in got["metadata"]["managedFields"]] == ["llmop-test"]
    assert got["metadata"]["managedFields"][0]["operation"] == "Apply"

    nodes = k8s_cluster.kubectl("get", "nodes", "-o", "name").stdout.split()
    assert "node/llmop-gpu-0" in nodes
    version = json.loads(k8s_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == version["clientVersion"]["gitVersion"]
    assert version["serverVersion"]["gitVersion"] == components.KUBERNETES_VERSION
