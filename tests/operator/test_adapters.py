"""Tenants' adapters, the pure parts: grants, binding, the per-pod plan and the status it yields."""

import json

import pytest

from llmop.operator.adapters.binding import BindReason, ManifestEntry, bind
from llmop.operator.adapters.grants import granted, selector_matches
from llmop.operator.adapters.pod_sync import AdapterOnPod, sync_plan
from llmop.operator.adapters.status import adapter_status, base_adapters, transitions
from llmop.operator.api.llmadapter import PodState
from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.api.tenancy import LabelSelector, TenancySpec
from llmop.operator.build.meta import Owner
from llmop.operator.build.tenancy import manifest_config_map

NOW = "2026-12-07T00:00:00Z"


def adapter(ns="team-a", name="sum", source="pvc://adapters/team-a/sum", base=("ml", "chat"), **spec):
    return {"metadata": {"namespace": ns, "name": name, "generation": 1},
            "spec": {"baseRef": {"namespace": base[0], "name": base[1]}, "source": source, **spec}}


def base(**tenancy):
    return LLMDeploymentSpec.model_validate({"tenancy": {"adapterClaims": ["adapters"], **tenancy}})


@pytest.mark.parametrize("selector,labels,want", [
    ({}, {}, True),
    ({"matchLabels": {"tier": "gold"}}, {"tier": "gold", "x": "y"}, True),
    ({"matchLabels": {"tier": "gold"}}, {"tier": "silver"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]}, {"tier": "silver"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, {}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, {"tier": "gold"}, False),
    ({"matchExpressions": [{"key": "llm", "operator": "Exists"}]}, {"llm": ""}, True),
    ({"matchExpressions": [{"key": "llm", "operator": "DoesNotExist"}]}, {"llm": ""}, False),
])  # fmt: skip
def test_label_selector_semantics(selector, labels, want):
    assert selector_matches(LabelSelector.model_validate(selector), labels) is want


def test_grants_own_namespace_listed_namespaces_and_selected_ones():
    t = TenancySpec.model_validate({"namespaces": ["team-a"], "namespaceSelector": {"matchLabels": {"llm": "yes"}}})
    assert granted("ml", t, "ml", {}) and granted("ml", t, "team-a", {})
    assert granted("ml", t, "team-b", {"llm": "yes"}) and not granted("ml", t, "team-b", {"llm": "no"})
    assert not granted("ml", TenancySpec(), "team-a", {"llm": "yes"})  # default: the base's namespace only


def test_bind_grants_and_maps_the_claim_into_the_pods():
    b = bind(adapter(pinned=True), base(namespaces=["team-a"], allowPinned=True), {})
    assert b.bound and b.reason is BindReason.GRANTED and b.model == "team-a/sum"
    assert b.entry == ManifestEntry("team-a/sum", "/mnt/pvc/adapters/team-a/sum", True)
    assert bind(adapter(source="pvc://adapters/team-a/sum/"), base(namespaces=["team-a"]), {}).entry.source == (
        "/mnt/pvc/adapters/team-a/sum")


def test_an_operator_watching_given_namespaces_says_what_it_cannot_see():
    spec = base(namespaceSelector={"matchLabels": {"llm": "yes"}})
    watched = ("ml", "team-a")
    b = bind(adapter(), spec, None, watched)  # labels unreadable there: the selector grants nothing
    assert b.reason is BindReason.SELECTOR_NOT_EVALUATED and "spec.tenancy.namespaces" in b.message
    assert bind(adapter(), base(namespaces=["team-a"]), None, watched).bound  # the list still grants
    assert bind(adapter(), base(), None, watched).reason is BindReason.NOT_GRANTED  # no selector: plainly not
    far = bind(adapter(base=("other", "chat")), spec, None, watched)
    assert far.reason is BindReason.BASE_NOT_WATCHED and "ml, team-a" in far.message
    assert _status(far, {})["phase"] == "Failed"  # the tenant must name another base
    assert not granted("ml", spec.tenancy, "team-b", None)


def test_per_namespace_claims_confine_each_tenant_to_its_directory():
    spec = base(namespaces=["team-a"], adapterClaimLayout="PerNamespace")
    entry = bind(adapter(source="pvc://adapters/team-a/v2/sum"), spec, {}).entry
    assert entry == ManifestEntry("team-a/sum", "/mnt/pvc/adapters/team-a/v2/sum", root="/mnt/pvc/adapters/team-a")
    assert entry.wire()["root"] == "/mnt/pvc/adapters/team-a"  # the engine refuses links out of it
    assert "root" not in bind(adapter(), base(namespaces=["team-a"]), {}).entry.wire()  # Shared: no confinement


def test_expected_rank_and_alpha_go_to_the_engine():
    entry = bind(adapter(rank=8, alpha=16), base(namespaces=["team-a"]), {}).entry
    assert (entry.rank, entry.alpha) == (8, 16.0)
    assert entry.wire() == {"name": "team-a/sum", "source": "/mnt/pvc/adapters/team-a/sum", "pinned": False,
                            "rank": 8, "alpha": 16.0}
    from llmop.engine.config import AdapterLoad

    assert AdapterLoad.model_validate(entry.wire()).rank == 8  # the engine's body takes what the operator sends


@pytest.mark.parametrize("spec,doc,reason", [
    (base(), adapter(), BindReason.NOT_GRANTED),
    (None, adapter(), BindReason.BASE_NOT_FOUND),
    (LLMDeploymentSpec(), adapter(), BindReason.TENANCY_DISABLED),
    (base(namespaces=["team-a"]), adapter(source="hf://org/lora"), BindReason.UNSUPPORTED_SOURCE),
    (base(namespaces=["team-a"]), adapter(source="pvc://other/x"), BindReason.UNSUPPORTED_SOURCE),
    (base(namespaces=["team-a"]), adapter(source="pvc://adapters"), BindReason.UNSUPPORTED_SOURCE),
    (base(namespaces=["team-a"]), adapter(source="pvc://adapters/../models/llama"), BindReason.UNSUPPORTED_SOURCE),
    (base(namespaces=["team-a"]), adapter(source="pvc://adapters/a/./b"), BindReason.UNSUPPORTED_SOURCE),
    (base(namespaces=["team-a"]), adapter(source="pvc://adapters/a//b"), BindReason.UNSUPPORTED_SOURCE),
    (base(namespaces=["team-a"]), adapter(pinned=True), BindReason.PINNING_NOT_ALLOWED),
    (base(namespaces=["team-a"]), adapter(source="relative/path"), BindReason.INVALID_SPEC),
    (base(namespaces=["team-a"]), adapter(rank=0), BindReason.INVALID_SPEC),
    (base(namespaces=["team-a"]), adapter(color="red"), BindReason.INVALID_SPEC),
    (base(namespaces=["team-a"], adapterClaimLayout="PerNamespace"), adapter(source="pvc://adapters/team-b/sum"),
     BindReason.OUTSIDE_NAMESPACE_DIRECTORY),
    (base(namespaces=["team-a"], adapterClaimLayout="PerNamespace"), adapter(source="pvc://adapters/team-a"),
     BindReason.OUTSIDE_NAMESPACE_DIRECTORY),
    (base(namespaces=["team-a"], adapterClaimLayout="PerNamespace"), adapter(source="pvc://adapters/sum"),
     BindReason.OUTSIDE_NAMESPACE_DIRECTORY),
])  # fmt: skip
def test_bind_refusals_have_reasons(spec, doc, reason):
    b = bind(doc, spec, {})
    assert not b.bound and b.entry is None and b.reason is reason and b.message


def test_pod_plan_loads_missing_reloads_changed_unloads_unbound_tenant_ids_only():
    want = {"a/x": ManifestEntry("a/x", "/mnt/pvc/c/x"), "a/y": ManifestEntry("a/y", "/mnt/pvc/c/y", True),
            "a/z": ManifestEntry("a/z", "/mnt/pvc/c/z"), "a/bad": ManifestEntry("a/bad", "/mnt/pvc/c/bad", True)}
    listing = [
        {"name": "a/x", "source": "/mnt/pvc/c/x", "state": "resident", "pinned": False},
        {"name": "a/y", "source": "/mnt/pvc/c/y", "state": "cpu", "pinned": False},  # pinned changed
        {"name": "a/bad", "source": "/mnt/pvc/c/bad", "state": "failed", "error": "no weights"},  # a start-up failure
        {"name": "b/gone", "source": "/mnt/pvc/c/gone", "state": "cpu", "pinned": False},
        {"name": "sql", "source": "/models/s3/sql", "state": "cpu", "pinned": False},
    ]
    plan = sync_plan(want, listing)
    assert [e.name for e in plan.load] == ["a/bad", "a/y", "a/z"]  # a failure with no backoff held: retried
    assert plan.unload == ("a/bad", "a/y", "b/gone")  # "sql" (the base's own, or loaded by hand) is not placement's
    assert plan.states["a/x"] == AdapterOnPod(PodState.LOADED) and plan.states["a/z"] == AdapterOnPod(PodState.LOADING)
    assert plan.states["a/y"].state is PodState.LOADING
    waiting = AdapterOnPod(PodState.FAILED, "no weights (failed 1x)")
    held = sync_plan(want, listing, held={"a/bad": waiting, "a/x": waiting})
    assert [e.name for e in held.load] == ["a/y", "a/z"] and "a/bad" not in held.unload
    assert held.states["a/bad"] == waiting  # reported as it failed, untouched until its backoff is over
    assert held.states["a/x"] == AdapterOnPod(PodState.LOADED)  # listed as loaded: a hold does not hide it


def test_failed_loads_are_retried_with_backoff_until_one_works():
    from llmop.operator.adapters import retries

    entry = ManifestEntry("a/x", "/mnt/pvc/c/x")
    want = {"a/x": entry}
    failed = {"a/x": AdapterOnPod(PodState.FAILED, "no weights")}
    book = retries.after_pass({}, want, failed, {"a/x"}, now=100.0)
    assert book["a/x"].failures == 1
    assert "a/x" in retries.held(book, want, 109.0) and retries.held(book, want, 110.0) == {}
    assert "no weights" in retries.held(book, want, 109.0)["a/x"].message
    untried = retries.after_pass(book, want, retries.held(book, want, 105.0), set(), now=105.0)
    assert untried == book  # held passes do not count as failures
    for n, t in enumerate([110.0, 130.0, 170.0, 250.0], start=2):  # 10, 20, 40, 80 s apart
        assert retries.held(book, want, t) == {}
        book = retries.after_pass(book, want, failed, {"a/x"}, now=t)
        assert book["a/x"].failures == n and "a/x" in retries.held(book, want, t + 1)
    assert [retries.backoff_s(n) for n in (1, 2, 7, 8, 30)] == [10, 20, 600, 600, 600]
    moved = {"a/x": ManifestEntry("a/x", "/mnt/pvc/c/x2")}
    assert retries.held(book, moved, 251.0) == {}  # a new source is tried at once
    assert retries.after_pass(book, moved, failed, {"a/x"}, now=251.0)["a/x"].failures == 1
    loaded = {"a/x": AdapterOnPod(PodState.LOADED)}
    assert retries.after_pass(book, want, loaded, {"a/x"}, now=900.0) == {}  # a load that works forgets
    assert retries.after_pass(book, {}, failed, set(), now=900.0) == {}  # unbound: forgotten


def test_pod_plan_knows_the_engines_resolved_source_of_what_it_loaded():
    want = {"a/x": ManifestEntry("a/x", "/mnt/pvc/c/latest")}
    listing = [{"name": "a/x", "source": "/mnt/pvc/c/v3", "state": "cpu", "pinned": False}]  # latest -> v3
    assert sync_plan(want, listing).unload == ("a/x",)  # unknown to this process: reloaded once
    settled = sync_plan(want, listing, {"/mnt/pvc/c/latest": "/mnt/pvc/c/v3"})
    assert settled.load == () and settled.unload == () and settled.states["a/x"].state is PodState.LOADED


def _status(binding, pods, old=None):
    return adapter_status(old or {}, binding, pods, 1, NOW)


def test_status_phases_and_conditions():
    bound = bind(adapter(), base(namespaces=["team-a"]), {})
    loaded, loading = AdapterOnPod(PodState.LOADED), AdapterOnPod(PodState.LOADING)
    ready = _status(bound, {"p0": loaded, "p1": loaded})
    assert ready["phase"] == "Ready" and (ready["readyPods"], ready["desiredPods"]) == (2, 2)
    assert ready["base"] == "ml/chat" and ready["model"] == "team-a/sum"
    assert {c["type"]: c["status"] for c in ready["conditions"]} == {"Bound": "True", "Ready": "True"}
    assert _status(bound, {"p0": loaded, "p1": loading})["phase"] == "Loading"
    assert _status(bound, {})["phase"] == "Pending"
    failed = _status(bound, {"p0": loaded, "p1": AdapterOnPod(PodState.FAILED, "rank 4096 > max_lora_rank 64")})
    assert failed["phase"] == "Failed" and "rank 4096" in failed["conditions"][1]["message"]

    refused = _status(bind(adapter(), base(), {}), {"p0": loaded})
    assert refused["phase"] == "Pending" and refused["pods"] == [] and refused["readyPods"] == 0
    assert refused["conditions"][0]["reason"] == "NotGranted"
    assert _status(bind(adapter(source="s3://b/x"), base(namespaces=["team-a"]), {}), {})["phase"] == "Failed"


def test_events_on_binding_and_failures_not_on_progress():
    bound = bind(adapter(), base(namespaces=["team-a"]), {})
    refused = _status(bind(adapter(), base(), {}), {})
    assert [(e[0], e[1]) for e in transitions({}, refused)] == [("Warning", "NotGranted")]
    loading = _status(bound, {"p0": AdapterOnPod(PodState.LOADING)}, refused)
    assert [e[1] for e in transitions(refused, loading)] == ["Granted"]
    ready = _status(bound, {"p0": AdapterOnPod(PodState.LOADED)}, loading)
    assert [e[1] for e in transitions(loading, ready)] == ["AllPodsLoaded"]
    assert transitions(ready, _status(bound, {"p0": AdapterOnPod(PodState.LOADED)}, ready)) == []


def test_base_counts_and_manifest():
    bindings = [bind(adapter(name=n), base(namespaces=["team-a"]), {}) for n in ("b", "a")]
    bindings.append(bind(adapter(ns="team-x"), base(), {}))
    assert base_adapters(bindings) == {"tenantAdapters": 2, "boundAdapters": ["team-a/a", "team-a/b"]}
    cm = manifest_config_map(Owner("chat", "ml", "u"), [b.entry.wire() for b in bindings if b.bound])
    assert cm["metadata"]["name"] == "chat-adapters"
    doc = json.loads(cm["data"]["adapters.json"])
    assert [e["name"] for e in doc["adapters"]] == ["team-a/a", "team-a/b"]


def test_the_bases_own_adapters_cannot_take_a_tenants_model_id():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        LLMDeploymentSpec.model_validate({"adapters": [{"name": "team-a/sum", "source": "/models/sum"}]})
    assert LLMDeploymentSpec.model_validate({"adapters": [{"name": "sql:v2", "source": "/models/sql"}]}).adapters


class RecordingAdmin:
    """An engine's admin API as placement sees it: a listing, and answers chosen per call."""

    def __init__(self, listing, unload_error=None, load_errors=None):
        self.listing, self.unload_error, self.load_errors, self.calls = listing, unload_error, load_errors or {}, []

    def list(self):
        return self.listing

    def unload(self, name):
        self.calls.append(("unload", name))
        if self.unload_error:
            raise self.unload_error

    def load(self, entry):
        self.calls.append(("load", entry.name))
        if entry.name in self.load_errors:
            raise self.load_errors[entry.name]
        return {"name": entry.name, "source": entry.source.replace("latest", "v3"), "state": "cpu"}


def test_a_pod_pass_reloads_only_after_the_unload_and_reports_refusals():
    from llmop.operator.adapters.engine_admin import AdminError
    from llmop.operator.adapters.placer import _sync_one

    want = {"a/x": ManifestEntry("a/x", "/mnt/pvc/c/x", pinned=True), "a/new": ManifestEntry("a/new", "/mnt/pvc/c/latest"),
            "a/full": ManifestEntry("a/full", "/mnt/pvc/c/f"), "a/old": ManifestEntry("a/old", "/mnt/pvc/c/o")}
    listing = [{"name": "a/x", "source": "/mnt/pvc/c/x", "state": "resident", "pinned": False}]
    in_use = RecordingAdmin(listing, unload_error=AdminError(409, "in use"), load_errors={
        "a/full": AdminError(409, "all 4 LoRA slots are pinned"), "a/old": AdminError(403, "outside the roots")})
    resolved = {}
    states, tried, unloads = _sync_one(in_use, want, resolved, "p0")
    assert tried == {"a/new", "a/full", "a/old"} and unloads == 1
    assert ("load", "a/x") not in in_use.calls  # its old version still serves: not unloaded, not reloaded
    assert states["a/x"].state is PodState.LOADING and "pending" in states["a/x"].message
    assert states["a/new"] == AdapterOnPod(PodState.LOADED) and resolved == {"/mnt/pvc/c/latest": "/mnt/pvc/c/v3"}
    assert states["a/full"].state is PodState.FAILED  # a conflict the same files cannot resolve
    assert states["a/old"].state is PodState.LOADING  # a pod on the template before the claim was mounted
    free = RecordingAdmin(listing)
    states, _, _ = _sync_one(free, {"a/x": want["a/x"]}, {}, "p0")
    assert free.calls == [("unload", "a/x"), ("load", "a/x")] and states["a/x"].state is PodState.LOADED
