"""Fixtures for the autoscaler end to end: the chart installed, the operator running as the
chart's ServiceAccount, a namespace, and a real engine process on localhost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests import `processes` (importlib mode)

from processes import Engine  # noqa: E402



@pytest.fixture
def autoscaler_operator(operator_slot):
    return operator_slot.run(env={"LLMOP_AUTOSCALER_TICK_SECONDS": "1"})


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
