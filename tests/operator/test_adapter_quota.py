"""Adapter quotas (operator/adapters/quota.py): who gets a base's places, first come first served,
through the pure functions, and one placement pass over a recording API client."""

import copy
import json

import pytest
from pydantic import ValidationError

from llmop.operator.adapters.binding import BindReason, bind
from llmop.operator.adapters.placer import AdapterPlacer
from llmop.operator.adapters.quota import within_quota
from llmop.operator.adapters.status import adapter_status, transitions
from llmop.operator.api.llmdeployment import GROUP, VERSION, LLMDeploymentSpec
from llmop.operator.api.tenancy import TenancySpec
from llmop.operator.build.meta import Owner
from llmop.operator.build.tenancy import MANIFEST_FILE, MANIFEST_LIMIT, manifest_config_map, manifest_entry_bytes
from llmop.operator.kube.client import Kube

from kube_fakes import RecordingApi  # tests/operator/conftest.py puts it on the path

NOW = "2026-12-07T00:00:00Z"
TENANTS = ["team-a", "team-b", "team-x"]


def adapter(ns, name, created, source=None):
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMAdapter",
            "metadata": {"namespace": ns, "name": name, "uid": f"{ns}-{name}", "generation": 1,
                         "creationTimestamp": created},
            "spec": {"baseRef": {"namespace": "ml", "name": "chat"},
                     "source": source or f"pvc://adapters/{ns}/{name}"}}  # fmt: skip


def base(**tenancy):
    return LLMDeploymentSpec.model_validate({"tenancy": {"adapterClaims": ["adapters"], **tenancy}})


def decide(adapters, spec):
    """One pass's decisions, by model id."""
    alone = [bind(a, spec, {}) for a in adapters]
    return {b.model: b for b in within_quota(adapters, alone, spec.tenancy)}


def settle(adapters, spec):
    """A pass that also writes each adapter's status (what the next pass reads)."""
    decided = decide(adapters, spec)
    for a in adapters:
        a["status"] = adapter_status(a.get("status") or {}, decided[f"{a['metadata']['namespace']}/{a['metadata']['name']}"],
                                     {}, 1, NOW)  # fmt: skip
    return decided


def bound(decided):
    return sorted(m for m, b in decided.items() if b.bound)


def test_places_go_by_creation_time_then_namespace_and_name():
    adapters = [adapter("team-b", "z", "2026-12-07T10:00:02Z"), adapter("team-b", "a", "2026-12-07T10:00:01Z"),
                adapter("team-a", "z", "2026-12-07T10:00:01Z"), adapter("team-a", "b", "2026-12-07T10:00:00Z")]
    decided = decide(adapters, base(namespaces=TENANTS, maxAdapters=3))
    assert bound(decided) == ["team-a/b", "team-a/z", "team-b/a"]
    assert decide(adapters[::-1], base(namespaces=TENANTS, maxAdapters=3)).keys() == decided.keys()
    assert bound(decide(adapters[::-1], base(namespaces=TENANTS, maxAdapters=3))) == bound(decided)
    over = decided["team-b/z"]
    assert over.reason is BindReason.QUOTA_EXCEEDED and over.entry is None
    assert over.message.startswith("LLMDeployment ml/chat holds its maxAdapters of 3 adapters")
    assert bound(decide(adapters, base(namespaces=TENANTS))) == sorted(decided)  # absent: no limit


def test_per_namespace_and_total_limits_together():
    adapters = [adapter("team-a", f"a{i}", f"2026-12-07T10:00:0{i}Z") for i in range(3)]
    adapters += [adapter("team-b", f"b{i}", f"2026-12-07T10:00:1{i}Z") for i in range(3)]
    decided = decide(adapters, base(namespaces=TENANTS, maxAdapters=3, maxAdaptersPerNamespace=2))
    # team-a's third is over its namespace's limit and takes no place of the total: team-b gets it
    assert bound(decided) == ["team-a/a0", "team-a/a1", "team-b/b0"]
    assert "maxAdaptersPerNamespace of 2 adapters from namespace team-a" in decided["team-a/a2"].message
    assert "holds its maxAdapters of 3" in decided["team-b/b1"].message
    assert {decided[m].reason for m in ("team-a/a2", "team-b/b1", "team-b/b2")} == {BindReason.QUOTA_EXCEEDED}
    per_ns = decide(adapters, base(namespaces=TENANTS, maxAdaptersPerNamespace=1))
    assert bound(per_ns) == ["team-a/a0", "team-b/b0"]


def test_a_freed_place_goes_to_the_oldest_waiting_adapter():
    spec = base(namespaces=TENANTS, maxAdapters=2)
    adapters = [adapter("team-a", "first", "2026-12-07T10:00:00Z"), adapter("team-b", "second", "2026-12-07T10:00:01Z"),
                adapter("team-x", "newest", "2026-12-07T10:00:03Z"), adapter("team-b", "third", "2026-12-07T10:00:02Z")]
    assert bound(settle(adapters, spec)) == ["team-a/first", "team-b/second"]
    waiting = adapters[3]["status"]
    assert waiting["phase"] == "Pending" and waiting["conditions"][0]["reason"] == "QuotaExceeded"
    del adapters[0]  # deleted: its place frees up on the next pass
    assert bound(settle(adapters, spec)) == ["team-b/second", "team-b/third"]
    assert bound(settle(adapters, base(namespaces=TENANTS, maxAdapters=3))) == ["team-b/second", "team-b/third",
                                                                               "team-x/newest"]


def test_a_bound_adapter_keeps_its_place_against_an_older_one_that_becomes_bindable():
    late = adapter("team-x", "old-but-ungranted", "2026-12-07T09:00:00Z")
    adapters = [late, adapter("team-a", "serving", "2026-12-07T10:00:00Z")]
    assert bound(settle(adapters, base(namespaces=["team-a"], maxAdapters=1))) == ["team-a/serving"]
    granted = settle(adapters, base(namespaces=TENANTS, maxAdapters=1))  # the grant comes later
    assert bound(granted) == ["team-a/serving"] and granted["team-x/old-but-ungranted"].reason is BindReason.QUOTA_EXCEEDED
    # a limit lowered below what is bound takes places back from the newest holders
    more = [*adapters, adapter("team-b", "newer", "2026-12-07T11:00:00Z")]
    assert bound(settle(more, base(namespaces=TENANTS, maxAdapters=3))) == [
        "team-a/serving", "team-b/newer", "team-x/old-but-ungranted"]
    assert bound(settle(more, base(namespaces=TENANTS, maxAdapters=2))) == ["team-a/serving", "team-x/old-but-ungranted"]


def test_a_place_held_on_another_base_is_no_place_here():
    moved = adapter("team-a", "moved", "2026-12-07T10:00:01Z")
    moved["status"] = {"base": "ml/other", "conditions": [{"type": "Bound", "status": "True"}]}
    adapters = [moved, adapter("team-a", "older", "2026-12-07T10:00:00Z")]
    assert bound(decide(adapters, base(namespaces=TENANTS, maxAdapters=1))) == ["team-a/older"]


def test_only_adapters_that_would_bind_count():
    adapters = [adapter("team-x", "ungranted", "2026-12-07T10:00:00Z"),
                adapter("team-a", "bad-source", "2026-12-07T10:00:00Z", source="s3://bucket/lora"),
                adapter("team-a", "ok", "2026-12-07T10:00:01Z")]
    decided = decide(adapters, base(namespaces=["team-a"], maxAdapters=1, maxAdaptersPerNamespace=1))
    assert bound(decided) == ["team-a/ok"]
    assert decided["team-x/ungranted"].reason is BindReason.NOT_GRANTED  # its own refusal, not the quota's
    assert decided["team-a/bad-source"].reason is BindReason.UNSUPPORTED_SOURCE


def test_limit_zero_binds_none_and_says_so_like_other_refusals():
    adapters = [adapter("team-a", "sum", "2026-12-07T10:00:00Z"), adapter("ml", "own", "2026-12-07T10:00:00Z")]
    decided = decide(adapters, base(namespaces=TENANTS, maxAdapters=0))
    assert bound(decided) == [] and {b.reason for b in decided.values()} == {BindReason.QUOTA_EXCEEDED}
    status = adapter_status({}, decided["team-a/sum"], {}, 1, NOW)
    assert status["phase"] == "Pending" and status["pods"] == [] and status["readyPods"] == 0
    assert [(e[0], e[1]) for e in transitions({}, status)] == [("Warning", "QuotaExceeded")]


def test_the_manifest_configmap_is_a_hard_ceiling():
    # sources are not length-limited: 100 kB each fill the 1 MiB after 10 adapters
    adapters = [adapter("team-a", f"a{i:02}", "2026-12-07T10:00:00Z", source=f"pvc://adapters/team-a/{'x' * 100_000}{i}")
                for i in range(12)]  # fmt: skip
    decided = decide(adapters, base(namespaces=TENANTS))
    assert bound(decided) == [f"team-a/a{i:02}" for i in range(10)]
    assert "its adapter manifest ConfigMap (1 MiB) has no room left" in decided["team-a/a10"].message
    cm = manifest_config_map(Owner("chat", "ml", "u"), [b.entry.wire() for b in decided.values() if b.bound])
    assert sum(len(k) + len(v) for k, v in cm["data"].items()) <= MANIFEST_LIMIT


def test_manifest_entry_bytes_add_up_to_the_manifest():
    entries = [b.entry.wire() for b in decide([adapter("team-a", f"a{i}", NOW) for i in range(5)],
                                              base(namespaces=TENANTS, allowPinned=True)).values()]
    entries.append({**entries[0], "name": "team-a/z", "rank": 8, "alpha": 16.0, "pinned": True, "root": "/mnt/pvc/a"})
    text = manifest_config_map(Owner("chat", "ml", "u"), entries)["data"][MANIFEST_FILE]
    assert 0 <= (len(text) + len(MANIFEST_FILE)) - sum(map(manifest_entry_bytes, entries)) <= 64


@pytest.mark.parametrize("tenancy", [{"maxAdapters": -1}, {"maxAdaptersPerNamespace": 0}])
def test_quota_minimums(tenancy):
    with pytest.raises(ValidationError):
        TenancySpec.model_validate(tenancy)
    assert TenancySpec.model_validate({"maxAdapters": 0, "maxAdaptersPerNamespace": 1}).max_adapters == 0


class Cluster:
    """The requests one placement pass makes for a base with no ready pods."""

    def __init__(self, spec, adapters):
        self.base = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
                     "metadata": {"name": "chat", "namespace": "ml", "uid": "u", "generation": 1},
                     "spec": spec, "status": {}}  # fmt: skip
        self.adapters = adapters

    def answer(self, verb, path, query, body):
        if path.endswith("/llmadapters") and verb == "GET":
            return 200, {"items": copy.deepcopy(self.adapters)}
        if path == f"/apis/{GROUP}/{VERSION}/namespaces/ml/llmdeployments/chat" and verb == "GET":
            return 200, copy.deepcopy(self.base)
        if path.endswith("/pods"):
            return 200, {"items": []}
        return 200, body or {}


def test_a_placement_pass_leaves_an_adapter_over_quota_out_of_the_manifest():
    spec = {"tenancy": {"namespaces": ["team-a"], "adapterClaims": ["adapters"], "maxAdaptersPerNamespace": 1}}
    cluster = Cluster(spec, [adapter("team-a", "new", "2026-12-07T10:00:01Z"), adapter("team-a", "old", "2026-12-07T10:00:00Z")])
    api = RecordingApi(answer=cluster.answer)
    outcome = AdapterPlacer(Kube(api, "llmop-adapters")).place("ml", "chat")
    assert outcome.bound == 1
    [manifest] = [c[4] for c in api.calls if c[4] and c[4].get("kind") == "ConfigMap"]
    assert [e["name"] for e in json.loads(manifest["data"][MANIFEST_FILE])["adapters"]] == ["team-a/old"]
    status = {c[1]: c[4]["status"] for c in api.calls if c[1].endswith("/status")}
    new = status[f"/apis/{GROUP}/{VERSION}/namespaces/team-a/llmadapters/new/status"]
    assert new["phase"] == "Pending" and new["conditions"][0]["reason"] == "QuotaExceeded"
    assert status[f"/apis/{GROUP}/{VERSION}/namespaces/ml/llmdeployments/chat/status"]["boundAdapters"] == ["team-a/old"]
    events = [c[4] for c in api.calls if c[0] == "POST" and c[4].get("kind") == "Event"]
    assert [(e["involvedObject"]["name"], e["reason"], e["type"]) for e in events] == [
        ("new", "QuotaExceeded", "Warning"), ("old", "Granted", "Normal")]
