"""Fixtures for tests that run real pods: the real node up with the engine image loaded, and the
operator (on the host, as the chart's ServiceAccount) rendering that image."""

from __future__ import annotations

import uuid

import pytest

from llmop.operator.local import OperatorProcess, install_chart, service_account_kubeconfig


@pytest.fixture(scope="module")
def pod_operator(k8s_cluster, real_node, tmp_path_factory):
    install_chart(k8s_cluster)
    workdir = tmp_path_factory.mktemp("operator")
    proc = OperatorProcess(service_account_kubeconfig(k8s_cluster, workdir / "kubeconfig"), workdir / "operator.log",
                           env={"LLMOP_ENGINE_IMAGE": real_node.engine_image})  # fmt: skip
    proc.start()
    yield proc
    proc.stop()


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
    proc = item.funcargs.get("pod_operator") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(proc, OperatorProcess):
        report.sections.append(("operator log", proc.tail()))
