"""Fixtures for the autoscaler end to end: the chart installed, the operator running as the
chart's ServiceAccount, a namespace, and a real engine process on localhost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests import `processes` (importlib mode)

from processes import Engine  # noqa: E402

from llmop.operator.local import OperatorProcess, install_chart, service_account_kubeconfig  # noqa: E402


@pytest.fixture(scope="module")
def autoscaler_operator(k8s_cluster, tmp_path_factory):
    install_chart(k8s_cluster)
    workdir = tmp_path_factory.mktemp("autoscaler-operator")
    kubeconfig = service_account_kubeconfig(k8s_cluster, workdir / "kubeconfig")
    # KUBECONFIG in the environment too: kopf's login reads the kubernetes client's default path,
    # which that library fixes when it is first imported.
    proc = OperatorProcess(kubeconfig, workdir / "operator.log",
                           env={"LLMOP_AUTOSCALER_TICK_SECONDS": "1", "KUBECONFIG": str(kubeconfig)})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def ns(k8s_cluster, autoscaler_operator):
    import uuid

    name = f"as-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    proc = Engine(tmp_path_factory.mktemp("engine"))
    yield proc
    proc.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    if report.failed:
        for key in ("autoscaler_operator", "engine"):
            proc = funcargs.get(key)
            if proc is not None:
                report.sections.append((f"{key} log", proc.tail()))
