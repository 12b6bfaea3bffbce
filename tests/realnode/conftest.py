"""Fixtures for tests that run real pods: the real node up with the engine image loaded, and the
operator (on the host, as the chart's ServiceAccount) rendering that image. A failed test's
report shows the pods, the namespace's Events and the kubelet's log tail."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def pod_operator(operator_slot, real_node):
    return operator_slot.run(env={"LLMOP_ENGINE_IMAGE": real_node.engine_image})


@pytest.fixture
def pod_ns(k8s_cluster, pod_operator):
    name = f"real-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    cluster, ns = funcargs.get("k8s_cluster"), funcargs.get("pod_ns")
    if not (report.failed and cluster and ns):
        return
    from llmop.devcluster import runner

    for title, args in (("pods (all namespaces)", ("get", "pods", "-A", "-o", "wide")),
                        ("replica sets", ("get", "rs", "-n", ns, "-o", "wide")),
                        ("events", ("get", "events", "-n", ns, "--sort-by=.lastTimestamp")),
                        ("nodes", ("describe", "nodes", "llmop-node-0"))):  # fmt: skip
        out = cluster.kubectl(*args, check=False)
        report.sections.append((title, (out.stdout + out.stderr)[-6000:]))
    report.sections.append(("kubelet log", runner.log_tail(runner.default_layout(), "kubelet", 60)))
