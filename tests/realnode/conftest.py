"""Fixtures for tests that run real pods: the real node up with the engine image loaded, and the
operator (on the host, as the chart's ServiceAccount) rendering that image. A failed test's
report shows the pods, the namespace's Events and the kubelet's log tail."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests import `pods` (pytest importlib mode)


@pytest.fixture
def pod_operator(operator_slot, real_node):
    # The autoscaler ticks every second, so the scaling tests see its decisions quickly.
    return operator_slot.run(env={"LLMOP_ENGINE_IMAGE": real_node.engine_image, "LLMOP_AUTOSCALER_TICK_SECONDS": "1"})


@pytest.fixture
def operator_pod(operator_slot, real_node):
    """The chart's operator as a pod on the real node, from the image of Dockerfile.operator."""
    from llmop.devcluster.testing import session_operator_image

    return operator_slot.in_pod(session_operator_image(), real_node.engine_image)


@pytest.fixture
def fresh_ns(k8s_cluster):
    name = f"real-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def pod_ns(pod_operator, fresh_ns):
    """A namespace, with the operator running on the host (most tests)."""
    return fresh_ns


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    cluster, ns = funcargs.get("k8s_cluster"), funcargs.get("fresh_ns")
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
