"""Fixtures for the autoscaler's cluster tests without pods: the chart installed, the operator
running as the chart's ServiceAccount with a one-second tick, and a namespace. (The end-to-end
scaling of real engine pods is in tests/realnode.)"""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def autoscaler_operator(operator_slot):
    return operator_slot.run(env={"LLMOP_AUTOSCALER_TICK_SECONDS": "1"})


@pytest.fixture
def ns(k8s_cluster, autoscaler_operator):
    name = f"as-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
