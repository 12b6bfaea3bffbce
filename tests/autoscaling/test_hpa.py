"""Mode hpa: the HPA mirrors the built-in policy and targets the LLMDeployment's /scale."""

from llmop.operator.autoscaling.hpa import ADAPTER_RULE, METRIC_NAME, build_hpa
from llmop.operator.autoscaling.spec import AutoscalingSpec
from llmop.operator.build.meta import Owner


def test_hpa_targets_the_llmdeployment_on_the_queue_wait_pods_metric():
    spec = AutoscalingSpec(enabled=True, mode="hpa", min_replicas=2, max_replicas=9,
                           target_queue_wait_seconds=0.25)
    hpa = build_hpa(Owner("chat", "ml", "uid-1"), spec)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "llmop.dev/v1alpha1",
                                             "kind": "LLMDeployment", "name": "chat"}
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == METRIC_NAME
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "250m"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 9)
    behavior = hpa["spec"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_adapter_rule_names_the_metric_and_both_signals():
    import yaml

    rule = yaml.safe_load(ADAPTER_RULE)["rules"][0]
    assert rule["name"]["as"] == METRIC_NAME
    assert "llmop_oldest_waiting_request_age_seconds" in rule["metricsQuery"]
    assert "llmop_request_queue_time_seconds_sum" in rule["metricsQuery"]
