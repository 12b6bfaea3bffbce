"""The autoscaling spec: camelCase on the wire, defaults that match the docs, cross-field rules."""

import pytest
from pydantic import ValidationError

from llmop.operator.autoscaling.spec import AUTOSCALING_CEL_RULES, AutoscalingSpec, AutoscalingStatus


def test_defaults_follow_the_rule_of_thumb():
    spec = AutoscalingSpec()
    assert spec.enabled is False and spec.mode == "builtin"
    assert spec.target_queue_wait_seconds == 0.2
    assert spec.metrics.source == "pods"
    assert spec.scale_down.stabilization_window_seconds > spec.scale_up.stabilization_window_seconds


def test_parses_camel_case_from_the_api_server():
    spec = AutoscalingSpec.model_validate(
        {"enabled": True, "minReplicas": 2, "maxReplicas": 6, "scaleDown": {"maxReplicasPerStep": 2}}
    )
    assert (spec.min_replicas, spec.max_replicas) == (2, 6)
    # A partial scaleDown keeps scale-down's own (long) window, not scale-up's.
    assert spec.scale_down.stabilization_window_seconds == 300


@pytest.mark.parametrize(
    "body",
    [
        {"minReplicas": 5, "maxReplicas": 2},
        {"metrics": {"source": "prometheus"}},
        {"scaleUp": {"stabilizationWindowSeconds": 600}, "scaleDown": {"stabilizationWindowSeconds": 60}},
        {"targetQueueWaitSeconds": 0},
        {"unknownField": 1},
    ],
)
def test_rejects_specs_that_cannot_work(body):
    with pytest.raises(ValidationError):
        AutoscalingSpec.model_validate(body)


def test_schema_carries_cel_rules_and_descriptions():
    schema = AutoscalingSpec.model_json_schema()
    assert schema["x-kubernetes-validations"] == AUTOSCALING_CEL_RULES
    assert all("description" in prop for prop in schema["properties"].values())
    assert "minReplicas" in schema["properties"]


def test_status_round_trips_by_alias():
    status = AutoscalingStatus(signal_seconds=0.3, desired_replicas=3)
    dumped = status.model_dump(by_alias=True, exclude_none=True)
    assert dumped["signalSeconds"] == 0.3
    assert AutoscalingStatus.model_validate(dumped) == status
