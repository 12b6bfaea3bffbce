"""`spec.autoscaling` and `status.autoscaling` of an LLMDeployment, as pydantic models.

The CRD's OpenAPI schema is generated from these models (`model_json_schema()`, which uses the
camelCase aliases), so every field carries the description `kubectl explain` shows, its default and
its range. Cross-field rules are written twice on purpose: as CEL in `x-kubernetes-validations`
(so the API server rejects a bad spec with a message naming the field) and as a pydantic validator
(so the operator and the tests see the same rule without an API server).

Why these knobs: the autoscaler scales on queue wait time, the delay users feel before their first
token. Queue wait is nearly zero until a replica saturates and then grows without bound, so the
loop needs a tolerance band (no flapping near the target), a short scale-up and a long scale-down
stabilization window, and per-step rate limits. See docs/autoscaling.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from llmop.operator.api.base import CRDModel
from llmop.operator.api.status import Condition

AUTOSCALING_CEL_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
        "message": "autoscaling.minReplicas must be less than or equal to autoscaling.maxReplicas",
    },
    {
        "rule": (
            "!has(self.metrics) || !has(self.metrics.source) || self.metrics.source != 'prometheus'"
            " || has(self.metrics.prometheus)"
        ),
        "message": "autoscaling.metrics.prometheus (with url) is required when metrics.source is prometheus",
    },
    {
        "rule": (
            "!has(self.scaleUp) || !has(self.scaleDown)"
            " || !has(self.scaleUp.stabilizationWindowSeconds)"
            " || !has(self.scaleDown.stabilizationWindowSeconds)"
            " || self.scaleDown.stabilizationWindowSeconds >= self.scaleUp.stabilizationWindowSeconds"
        ),
        "message": "autoscaling.scaleDown.stabilizationWindowSeconds must not be shorter than scaleUp's",
    },
]


def _window(default: int):
    return Field(
        default,
        ge=0,
        le=3600,
        description=(
            "Recommendations from this many past seconds are considered before moving: scale-up "
            "uses the lowest of them, scale-down the highest, so a short spike or dip does not move "
            "replicas."
        ),
    )


def _step(default: int):
    return Field(default, ge=1, le=1000, description="Most replicas added (or removed) by one decision.")


def _percent(default: int):
    return Field(
        default,
        ge=1,
        le=1000,
        description=(
            "Most replicas added (or removed) by one decision as a percentage of current replicas; "
            "the larger of this and maxReplicasPerStep applies."
        ),
    )


def _period(default: int):
    return Field(default, ge=0, le=3600, description="Least seconds between two moves in this direction.")


class ScaleUpRules(CRDModel):
    """How fast replicas may grow (the HPA `behavior.scaleUp` idea); fast by default."""

    stabilization_window_seconds: int = _window(0)
    max_replicas_per_step: int = _step(4)
    max_percent_per_step: int = _percent(100)
    period_seconds: int = _period(15)


class ScaleDownRules(CRDModel):
    """How fast replicas may shrink (the HPA `behavior.scaleDown` idea); slow by default."""

    stabilization_window_seconds: int = _window(300)
    max_replicas_per_step: int = _step(2)
    max_percent_per_step: int = _percent(25)
    period_seconds: int = _period(30)


class PrometheusSource(CRDModel):
    """Read the signal from a Prometheus server instead of scraping pods."""

    url: str = Field(
        min_length=1,
        pattern=r"^https?://",
        description="Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090.",
    )
    selector: str = Field(
        "",
        max_length=1024,
        description=(
            "Extra PromQL label matchers added to every query, e.g. `namespace=\"ml\",app=\"chat\"`; "
            "by default the pods of this LLMDeployment are matched by their `pod` label."
        ),
    )
    pod_label: str = Field(
        "pod", min_length=1, description="The series label that names the pod (or scrape target)."
    )
    timeout_seconds: float = Field(5.0, gt=0, le=60, description="HTTP timeout of one query.")


class MetricsSource(CRDModel):
    """Where the queue-wait signal comes from."""

    source: Literal["pods", "prometheus"] = Field(
        "pods",
        description=(
            "`pods`: scrape each ready engine pod's /metrics directly (no extra components). "
            "`prometheus`: query a Prometheus server (see `prometheus`)."
        ),
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="Port to scrape (pods source); default: the engine's port (spec.engine.port)."
    )
    path: str = Field("/metrics", pattern=r"^/", description="Metrics path (pods source).")
    timeout_seconds: float = Field(2.0, gt=0, le=60, description="HTTP timeout of one scrape.")
    prometheus: PrometheusSource | None = Field(
        None, description="Prometheus server to query; required when source is prometheus."
    )
    targets: list[str] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "For engines outside the cluster: base URLs (http://host:port) scraped instead of the ready "
            "pods found by the selector; each target stands for one ready replica. Leave empty for engines "
            "that run as this LLMDeployment's pods."
        ),
    )


class AutoscalingSpec(CRDModel):
    """Scale the engine replicas on queue wait time (arrival to first scheduled), not CPU."""

    model_config = CRDModel.model_config | {"json_schema_extra": {"x-kubernetes-validations": AUTOSCALING_CEL_RULES}}

    enabled: bool = Field(
        False,
        description=(
            "Let the operator own the replica count through the /scale subresource. Leave "
            "spec.replicas out of GitOps-managed manifests when this is on."
        ),
    )
    mode: Literal["builtin", "hpa"] = Field(
        "builtin",
        description=(
            "`builtin`: the operator's own loop decides and writes /scale. `hpa`: the operator emits "
            "an autoscaling/v2 HorizontalPodAutoscaler on a Pods metric instead (needs "
            "prometheus-adapter; see docs/autoscaling.md)."
        ),
    )
    min_replicas: int = Field(1, ge=1, le=1000, description="Never fewer replicas than this.")
    max_replicas: int = Field(4, ge=1, le=1000, description="Never more replicas than this.")
    target_queue_wait_seconds: float = Field(
        0.2,
        gt=0,
        le=600,
        description=(
            "Target queue wait (seconds from arrival to first scheduled) per replica; the field's "
            "rule of thumb is to add a replica when average queue wait passes 200 ms."
        ),
    )
    metric_window_seconds: int = Field(
        30,
        ge=5,
        le=3600,
        description="Window over which the queue-time histogram's mean is taken (counter deltas).",
    )
    interval_seconds: int = Field(
        15, ge=1, le=600, description="How often the autoscaler collects metrics and decides."
    )
    target_utilization: float = Field(
        0.7,
        gt=0.1,
        le=1.0,
        description=(
            "Share of a pod's learned saturation throughput (requests/s admitted while its queue "
            "never emptied) that demand may use: it floors scale-down and scales up ahead of the "
            "queue. Lower keeps more headroom for surges."
        ),
    )
    pod_startup_seconds: int = Field(
        60,
        ge=0,
        le=3600,
        description=(
            "About how long a new engine pod takes to become Ready (image, weights, warm-up): a "
            "rising demand is forecast this far ahead so capacity is ready when it arrives."
        ),
    )
    tolerance: float = Field(
        0.1,
        ge=0,
        le=0.9,
        description=(
            "No change while signal/target is within 1 ± tolerance: steady load near the target "
            "does not flap."
        ),
    )
    scale_up: ScaleUpRules = Field(
        default_factory=ScaleUpRules, description="Limits on scaling up (fast by default)."
    )
    scale_down: ScaleDownRules = Field(
        default_factory=ScaleDownRules,
        description="Limits on scaling down (slow by default: a longer window than scale-up).",
    )
    metrics: MetricsSource = Field(
        default_factory=MetricsSource, description="Where the queue-wait signal is read."
    )

    @model_validator(mode="after")
    def _cross_field(self) -> "AutoscalingSpec":
        """Mirror AUTOSCALING_CEL_RULES for callers without an API server."""
        if self.min_replicas > self.max_replicas:
            raise ValueError(AUTOSCALING_CEL_RULES[0]["message"])
        if self.metrics.source == "prometheus" and self.metrics.prometheus is None:
            raise ValueError(AUTOSCALING_CEL_RULES[1]["message"])
        if self.scale_down.stabilization_window_seconds < self.scale_up.stabilization_window_seconds:
            raise ValueError(AUTOSCALING_CEL_RULES[2]["message"])
        return self


# ---------------------------------------------------------------------------------------------
# Status: written only by the autoscaler timer, under status.autoscaling.


class PodSignal(CRDModel):
    """What one engine pod (or scrape target) reported in the last collection."""

    name: str = Field(description="Pod name, or the target URL for `metrics.targets`.")
    ready: bool = Field(description="Counted as capacity (Ready and not terminating).")
    scraped: bool = Field(description="Its metrics were read in the last collection.")
    queue_wait_mean_seconds: float | None = Field(
        None, description="Mean queue wait of requests admitted during the window."
    )
    oldest_waiting_age_seconds: float | None = Field(
        None, description="Age of the oldest request still waiting."
    )
    signal_seconds: float | None = Field(None, description="This pod's combined signal.")
    waiting: float | None = Field(None, description="Requests waiting in its queue.")
    running: float | None = Field(None, description="Requests running.")


class Decision(CRDModel):
    """One autoscaler decision (kept for the last move and in the short history)."""

    time: str = Field(description="RFC 3339 time of the decision.")
    current_replicas: int = Field(description="Replicas before the decision.")
    desired_replicas: int = Field(description="Replicas after the decision.")
    signal_seconds: float | None = Field(None, description="Aggregated signal at the time.")
    reason: str = Field(description="Machine-readable reason, e.g. ScaleUp, HoldTolerance.")
    message: str = Field("", description="Human-readable explanation.")


class Recommendation(CRDModel):
    """A raw recommendation, kept for the stabilization windows (survives operator restarts)."""

    time: float = Field(description="Unix time of the recommendation.")
    replicas: int = Field(description="Replicas recommended before stabilization and rate limits.")


class DemandSample(CRDModel):
    """A demand estimate (requests/s arriving, plus the backlog to drain) at one time."""

    time: float = Field(description="Unix time of the estimate.")
    requests_per_second: float = Field(description="Estimated demand in requests/s.")


class AutoscalingStatus(CRDModel):
    """What the autoscaler saw and decided; written to status.autoscaling on every tick."""

    signal_seconds: float | None = Field(
        None, description="Aggregated queue-wait signal: mean of the per-pod signals of ready pods."
    )
    target_queue_wait_seconds: float | None = Field(None, description="Target it was compared with.")
    current_replicas: int | None = Field(None, description="Replicas in /scale when it decided.")
    ready_replicas: int | None = Field(None, description="Pods counted as capacity.")
    desired_replicas: int | None = Field(None, description="Replicas it decided on.")
    pods: list[PodSignal] = Field(default_factory=list, description="Per-pod signal.")
    last_decision: Decision | None = Field(None, description="The most recent decision.")
    last_scale_time: str | None = Field(None, description="When replicas were last changed.")
    last_scale_up_time: float | None = Field(None, description="Unix time of the last scale-up.")
    last_scale_down_time: float | None = Field(None, description="Unix time of the last scale-down.")
    capacity_per_pod_rps: float | None = Field(
        None,
        description=(
            "Learned requests/s one pod admits when saturated; scale-down never goes below the "
            "replicas this says the current load needs."
        ),
    )
    demand_history: list[DemandSample] = Field(
        default_factory=list, description="Recent demand estimates, for the demand trend."
    )
    observing_since: float | None = Field(
        None, description="Unix time recommendations started; scale-down needs a full window."
    )
    history: list[Decision] = Field(
        default_factory=list, description="Recent replica changes, newest last (bounded)."
    )
    recommendations: list[Recommendation] = Field(
        default_factory=list, description="Raw recommendations within the stabilization windows."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="MetricsAvailable and ScalingLimited conditions."
    )
