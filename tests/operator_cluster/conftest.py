"""Fixtures for the operator on the real control plane: the chart installed, the operator running
as the chart's ServiceAccount, and a fresh namespace per test module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests import `harness` (pytest importlib mode)

from harness import OperatorProcess, install_chart, new_namespace, service_account_kubeconfig


@pytest.fixture(scope="session")
def operator(k8s_cluster, tmp_path_factory):
    install_chart(k8s_cluster)
    workdir = tmp_path_factory.mktemp("operator")
    proc = OperatorProcess(service_account_kubeconfig(k8s_cluster, workdir / "kubeconfig"), workdir / "operator.log")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def ns(k8s_cluster, operator):
    name = new_namespace(k8s_cluster)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    proc = item.funcargs.get("operator") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(proc, OperatorProcess):
        report.sections.append(("operator log", proc.tail()))
