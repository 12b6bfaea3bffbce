"""Fixtures for the operator on the real control plane: the chart installed, the operator running
as the chart's ServiceAccount, and a fresh namespace per test module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests import `harness` (pytest importlib mode)

from harness import new_namespace


@pytest.fixture
def operator(operator_slot):
    return operator_slot.run()


@pytest.fixture
def ns(k8s_cluster, operator):
    name = new_namespace(k8s_cluster)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
