"""desired_state: an LLMDeployment as stored in, everything the operator wants to exist out.

A pure function of (object, settings): parse the spec, size it, resolve the sources, render the
engine config, build the objects and name those the spec turned off. Any reason the spec cannot
work raises SpecError before a single object exists, so a bad spec never half-creates anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build import objects
from llmop.operator.build.engine_config import engine_config
from llmop.operator.build.errors import SpecCondition, SpecError, SpecReason
from llmop.operator.build.meta import Owner
from llmop.operator.build.network_policy import network_policy, network_policy_key
from llmop.operator.build.pod import engine_pod_template
from llmop.operator.build.settings import Settings
from llmop.operator.build.sources import sources_for
from llmop.operator.build.tenancy import operator_made_secret
from llmop.operator.kube.identity import ObjectKey
from llmop.operator.sizing.from_spec import plan_for
from llmop.operator.sizing.plan import SizingError, SizingPlan

__all__ = ["DesiredState", "SpecError", "desired_state"]


@dataclass(frozen=True)
class DesiredState:
    """The parsed spec, its sizing plan, and the objects to apply (ConfigMap first); `engine` is
    which of them is the engine Deployment (its status is the LLMDeployment's readiness); `absent`
    the objects the spec turned off, which must not exist (the NetworkPolicy when disabled);
    `created_once` objects made when absent and never re-applied (the admin credential Secret the
    operator generates for spec.tenancy)."""

    owner: Owner
    spec: LLMDeploymentSpec
    plan: SizingPlan
    endpoint: str
    objects: tuple[dict[str, Any], ...]
    engine: ObjectKey
    absent: tuple[ObjectKey, ...] = ()
    created_once: tuple[dict[str, Any], ...] = ()


def parse_spec(body: dict[str, Any]) -> LLMDeploymentSpec:
    """The spec, or SpecError(Degraded, InvalidSpec) for one the schema let through but the
    operator cannot read (e.g. written under an older CRD)."""
    try:
        return LLMDeploymentSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        problems = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise SpecError(SpecCondition.DEGRADED, SpecReason.INVALID_SPEC, problems) from err


def desired_state(body: dict[str, Any], settings: Settings) -> DesiredState:
    """Everything one LLMDeployment should be; SpecError when it cannot be."""
    owner = Owner.from_body(body)
    spec = parse_spec(body)
    try:
        plan = plan_for(spec)
    except SizingError as err:
        raise SpecError(SpecCondition.SIZING_VALID, err.reason, str(err)) from err
    sources = sources_for(spec, settings)
    engine_yaml = engine_config(spec, owner.name, plan, sources).to_yaml()
    config_hash = hashlib.sha256(engine_yaml.encode()).hexdigest()[:16]
    cm = objects.config_map(owner, engine_yaml)
    template = engine_pod_template(owner, spec, settings, sources, plan.tensor_parallel_size,
                                   cm["metadata"]["name"], config_hash)  # fmt: skip
    engine = objects.deployment(owner, spec, template)
    if spec.network_policy.enabled:
        optional, absent = (network_policy(owner, spec, settings.operator_namespace),), ()
    else:
        optional, absent = (), (network_policy_key(owner),)
    return DesiredState(
        owner=owner,
        spec=spec,
        plan=plan,
        endpoint=f"http://{owner.name}.{owner.namespace}.svc:{spec.engine.port}/v1",
        objects=(
            cm,
            engine,
            objects.service(owner, spec.engine.port),
            objects.pod_disruption_budget(owner, spec),
            *optional,
        ),
        engine=ObjectKey.of(engine),
        absent=absent,
        created_once=tuple(o for o in (operator_made_secret(owner, spec),) if o is not None),
    )
