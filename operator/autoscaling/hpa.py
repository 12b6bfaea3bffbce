"""Mode `hpa`: an autoscaling/v2 HorizontalPodAutoscaler on a Pods metric, for clusters that
already run prometheus-adapter and prefer the stock controller to the operator's loop.

The HPA targets the LLMDeployment itself (through its /scale subresource, like the built-in loop),
so the Deployment still follows the LLMDeployment and GitOps still never fights the replica count.
What it cannot do that the built-in loop does: hold on missing metrics per pod (the HPA assumes
them at target), learn the per-pod capacity that floors scale-down, or use a per-object tolerance.
"""

from __future__ import annotations

from typing import Any

from llmop.operator.api.llmdeployment import API_VERSION, KIND
from llmop.operator.build.meta import Owner
from llmop.operator.kube.identity import ObjectKey

from .spec import AutoscalingSpec

METRIC_NAME = "llmop_queue_wait_seconds"
HPA_API_VERSION, HPA_KIND = "autoscaling/v2", "HorizontalPodAutoscaler"

# prometheus-adapter rule exposing METRIC_NAME per pod: the windowed mean queue wait from the
# histogram's counters, or the oldest waiting request's age when that is larger (a stalled queue
# admits nothing, so the mean alone would read NaN exactly when it matters).
ADAPTER_RULE = r"""rules:
- seriesQuery: 'llmop_request_queue_time_seconds_count{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
      pod: {resource: pod}
  name:
    matches: "^llmop_request_queue_time_seconds_count$"
    as: "llmop_queue_wait_seconds"
  metricsQuery: |
    (
      (sum by (<<.GroupBy>>) (rate(llmop_request_queue_time_seconds_sum{<<.LabelMatchers>>}[1m]))
        / sum by (<<.GroupBy>>) (rate(llmop_request_queue_time_seconds_count{<<.LabelMatchers>>}[1m])))
      >= max by (<<.GroupBy>>) (llmop_oldest_waiting_request_age_seconds{<<.LabelMatchers>>})
    )
    or max by (<<.GroupBy>>) (llmop_oldest_waiting_request_age_seconds{<<.LabelMatchers>>})
"""


def _milli(seconds: float) -> str:
    """A Kubernetes quantity for a duration in seconds (0.2 -> "200m")."""
    return f"{round(seconds * 1000)}m"


def _rules(rules) -> dict[str, Any]:
    """HPA behaviour for one direction; selectPolicy Max = the larger of the two limits, as built-in."""
    return {
        "stabilizationWindowSeconds": rules.stabilization_window_seconds,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Pods", "value": rules.max_replicas_per_step,
             "periodSeconds": max(1, rules.period_seconds)},
            {"type": "Percent", "value": rules.max_percent_per_step,
             "periodSeconds": max(1, rules.period_seconds)},
        ],
    }


def hpa_key(owner: Owner) -> ObjectKey:
    """Which object the HPA of one LLMDeployment is (named after it)."""
    return ObjectKey(HPA_API_VERSION, HPA_KIND, owner.namespace, owner.name)


def build_hpa(owner: Owner, spec: AutoscalingSpec) -> dict[str, Any]:
    """The HPA for one LLMDeployment: same bounds, target and behaviour as the built-in loop."""
    return {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": owner.metadata(),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": owner.name},
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": [{
                "type": "Pods",
                "pods": {
                    "metric": {"name": METRIC_NAME},
                    "target": {"type": "AverageValue",
                               "averageValue": _milli(spec.target_queue_wait_seconds)},
                },
            }],
            "behavior": {
                "scaleUp": _rules(spec.scale_up),
                "scaleDown": _rules(spec.scale_down),
            },
        },
    }
