"""Least privilege: the RBAC rules (operator/rbac.py, rendered into the chart) grant exactly what the
operator uses, derived here from what the code does rather than read off the rules.

What the operator's own code asks for: `llmop operator` is started (`cli.run`) over a recording API
client (`kube_fakes.RecordingApi`, under the real `Kube`), and its kopf handlers and autoscaler daemon
are driven through create, spec update, owned-object and pod changes, the NetworkPolicy turned off, a
spec error, HPA on and off, a scale-up, tenancy with an LLMAdapter placed on the ready pods (whose
admin ports refuse connections), and deletion, with leader election on (its Lease created, then
released on shutdown); every recorded request becomes (apiGroup, resource, verb) the way the
API server authorizes it. What kopf asks for is read off its registry (the resources handlers.py and
the autoscaler declare) and the settings `handlers.configure` leaves and `cli.run` passes to kopf.
"""

import argparse
import asyncio
import base64
import copy
import logging

import kopf
import pytest

from llmop.operator import cli, controllers, handlers
from llmop.operator.api.llmdeployment import GROUP, PLURAL, VERSION
from llmop.operator.autoscaling import timer
from llmop.operator.autoscaling.decision import PodSample
from llmop.operator.kube.client import PLURALS
from llmop.operator.rbac import CLUSTER_RULES, LEADER_ELECTION_RULES, RULES

from kube_fakes import RecordingApi  # tests/operator/conftest.py puts it on the path
from kopf_fakes import OneTick

APPLY = "application/apply-patch+yaml"
NS, NAME = "ml", "chat"
CR = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/{NAME}"
TENANT = "team-a"
ADAPTER = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMAdapter",
           "metadata": {"name": "sum", "namespace": TENANT, "uid": "a", "generation": 1},
           "spec": {"baseRef": {"name": NAME, "namespace": NS}, "source": "pvc://adapters/sum"}}  # fmt: skip
SPEC = {"replicas": 2, "model": {"source": "hf://meta-llama/Meta-Llama-3-70B-Instruct"}}


class ApiServer:
    """Just enough of an API server for one LLMDeployment: it keeps the object (status and /scale
    included), answers applies with a stored object whose Deployment is ready or not, lists engine
    pods (unschedulable, or ready with IPs) and forgets the object when deleted."""

    def __init__(self):
        self.body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment",
                     "metadata": {"name": NAME, "namespace": NS, "uid": "u", "generation": 1},
                     "spec": copy.deepcopy(SPEC), "status": {}}  # fmt: skip
        self.ready = False
        self.gone = False
        self.lease = None
        self.secret = None

    def answer(self, verb, path, query, body):
        if "/leases" in path:
            return self._lease(verb, body)
        if "/secrets" in path:
            return self._secret(verb, body)
        if path.endswith("/llmadapters") and verb == "GET":
            return 200, {"items": [copy.deepcopy(ADAPTER)]}
        if "/llmadapters/" in path and path.endswith("/status"):
            return 200, copy.deepcopy(ADAPTER)
        if path.startswith("/api/v1/namespaces/") and path.count("/") == 4 and verb == "GET":
            return 200, {"metadata": {"name": path.rsplit("/", 1)[1], "labels": {"tenant": "yes"}}}
        if path.startswith(CR):
            return self._llmdeployment(verb, path[len(CR):], body)
        if path.endswith("/pods") and verb == "GET":
            return 200, {"items": [self._pod(i) for i in range(2)]}
        if verb == "POST":  # an Event
            return 201, body
        if verb == "DELETE":
            return 404, {"reason": "NotFound"}  # the HPA or NetworkPolicy was never there
        if verb == "PATCH" and query and query[0][0] == "fieldManager":  # server-side apply
            stored = copy.deepcopy(body) | {"status": {}}
            stored["metadata"]["generation"] = 1
            if body["kind"] == "Deployment":
                n = body["spec"]["replicas"] if self.ready else 0
                stored["status"] = {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "updatedReplicas": n}
            return 200, stored
        return 400, {"reason": f"unexpected {verb} {path}"}

    def _llmdeployment(self, verb, sub, body):
        if self.gone:
            return 404, {"reason": "NotFound"}
        replicas = self.body["spec"]["replicas"]
        if sub == "/scale":
            if verb == "PATCH":
                self.body["spec"]["replicas"] = body["spec"]["replicas"]
            return 200, {"spec": {"replicas": self.body["spec"]["replicas"]},
                         "status": {"replicas": replicas, "selector": f"app.kubernetes.io/instance={NAME}"}}
        if sub == "/status" and verb == "PATCH":
            self.body["status"] = {**self.body["status"], **body["status"]}
        return 200, copy.deepcopy(self.body)

    def _secret(self, verb, body):
        if verb == "POST":
            self.secret = {"metadata": body["metadata"], "data": {
                k: base64.b64encode(v.encode()).decode() for k, v in body["stringData"].items()}}
        if self.secret is None:
            return 404, {"reason": "NotFound"}
        return 200, copy.deepcopy(self.secret)

    def _lease(self, verb, body):
        if verb in ("POST", "PUT"):
            self.lease = copy.deepcopy(body)
            self.lease["metadata"]["resourceVersion"] = str(int(self.lease["metadata"].get("resourceVersion", 0)) + 1)
        if self.lease is None:
            return 404, {"reason": "NotFound"}
        return 200, copy.deepcopy(self.lease)

    def _pod(self, i):
        meta = {"name": f"{NAME}-{i}", "namespace": NS, "labels": {"app.kubernetes.io/instance": NAME}}
        if self.ready:
            return {"metadata": meta, "status": {"phase": "Running", "podIP": f"127.0.0.{i + 1}",
                                                 "conditions": [{"type": "Ready", "status": "True"}]}}
        return {"metadata": meta, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}}


class BusyPods:
    """Every pod's oldest request waited far longer than the target: the autoscaler scales up."""

    def collect(self, targets, window, timeout, now):
        return tuple(PodSample(t.name, True, True, 60.0, 60.0, 60.0, oldest_waiting_age=5.0) for t in targets)


def start_operator(monkeypatch, api, namespaces):
    """`llmop operator` as the chart runs it, on `api`: the operator object and what kopf was told."""
    monkeypatch.setattr(controllers, "make_api_client", lambda kubeconfig: api)
    monkeypatch.setattr(kopf, "configure", lambda **_: None)
    runs = []
    monkeypatch.setattr(kopf, "run", lambda **kwargs: runs.append(kwargs))
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    args = [*(f"--namespace={n}" for n in namespaces), "--liveness=", "--leader-elect",
            "--leader-election-namespace=llmop-system"]  # fmt: skip
    assert cli.run(parser.parse_args(args)) == 0
    (run,) = runs
    return run["memo"], run


def drive(memo, server):
    """Every path the reconciler and the autoscaler take, through the kopf handlers."""
    body = server.body
    handlers.reconcile_llmdeployment(body=copy.deepcopy(body), memo=memo)  # create: pods unschedulable
    server.ready = True
    body["spec"] |= {"replicas": 3, "adapters": [{"name": "sql", "source": "s3://bucket/sql"}]}
    body["metadata"]["generation"] = 2
    handlers.reconcile_llmdeployment(body=copy.deepcopy(body), memo=memo)  # spec update: rolled out
    # Tenancy: the admin Secret created, the adapter placed on the ready pods (port 9: refused).
    body["spec"] |= {"tenancy": {"namespaceSelector": {"matchLabels": {"tenant": "yes"}}, "adapterClaims": ["adapters"]},
                     "engine": {"adminPort": 9}}  # fmt: skip
    body["metadata"]["generation"] = 3
    handlers.reconcile_llmdeployment(body=copy.deepcopy(body), memo=memo)
    handlers._adapter_changed(body=copy.deepcopy(ADAPTER), memo=memo, type="ADDED")
    asyncio.run(handlers.place_adapters(body=copy.deepcopy(body), memo=memo, stopped=OneTick()))
    owned = {"metadata": {"namespace": NS, "ownerReferences": [
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "name": NAME}]}}
    handlers._owned_changed(body=owned, memo=memo)
    handlers._engine_pod_changed(body=server._pod(0), memo=memo)
    handlers.resync(body=copy.deepcopy(body), memo=memo)
    body["spec"]["networkPolicy"] = {"enabled": False}  # turned off: the NetworkPolicy deleted
    handlers.reconcile_llmdeployment(body=copy.deepcopy(body), memo=memo)
    body["spec"]["engine"] = {"overrides": {"no_such_field": 1}}  # can never work: status and an Event
    with pytest.raises(kopf.PermanentError):
        handlers.reconcile_llmdeployment(body=copy.deepcopy(body), memo=memo)
    del body["spec"]["engine"]

    for autoscaling in ({"enabled": True, "mode": "hpa", "maxReplicas": 8},  # the HPA applied
                        {"enabled": True, "maxReplicas": 8}):  # builtin: the HPA deleted, /scale written
        body["spec"]["autoscaling"] = autoscaling
        memo.llmop_autoscaler = timer.TimerState(collector=BusyPods())
        asyncio.run(timer.autoscaler(body=body, spec=body["spec"], status=body["status"], name=NAME, namespace=NS,
                                     memo=memo, logger=logging.getLogger("t"), stopped=OneTick()))
        assert memo.llmop_autoscaler.last_error is None

    body["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"  # deleted: the garbage collector's job
    handlers.reconcile_llmdeployment(body=copy.deepcopy(body), memo=memo)
    server.gone = True
    handlers._owned_changed(body=owned, memo=memo)  # an owned object's last event, its owner gone


def _group_of(api_version):
    return api_version.rpartition("/")[0]


def authorized(call):
    """The (apiGroup, resource, verb) triples the API server checks for one recorded request."""
    verb, path, query, content_type, body = call
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:3]])  # plural, or plural/subresource
    named = len(rest) > 1
    if verb == "GET":
        rbac_verb = "get" if named else "watch" if ("watch", "true") in query else "list"
    else:
        rbac_verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[verb]
    out = {(group, resource, rbac_verb)}
    if content_type == APPLY:
        out.add((group, resource, "create"))  # server-side apply creates what is not there yet
        for ref in body["metadata"].get("ownerReferences", []):
            if ref.get("blockOwnerDeletion"):  # OwnerReferencesPermissionEnforcement's check
                out.add((_group_of(ref["apiVersion"]), f"{PLURALS[ref['kind']]}/finalizers", "update"))
    return out


def kopf_needs(run, settings):
    """What kopf itself does for the handlers registered: list and watch every resource a handler
    names; patch (progress, diff-base annotations, finalizers) those with change handlers or daemons;
    CRDs when it scans them; Events when it posts them; its peering objects unless standalone."""
    registry = kopf.get_default_registry()
    needs = set()
    for kind in (registry._watching, registry._spawning, registry._changing, registry._indexing, registry._webhooks):
        for handler in kind.get_all_handlers():
            group, plural = handler.selector.group, handler.selector.plural or handler.selector.any_name
            needs |= {(group, plural, "list"), (group, plural, "watch")}
            if kind in (registry._spawning, registry._changing):
                needs.add((group, plural, "patch"))
    if not settings.scanning.disabled:
        needs |= {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")}
        if not run["clusterwide"]:
            needs |= {("", "namespaces", v) for v in ("list", "watch")}
    if settings.posting.enabled:
        needs.add(("", "events", "create"))
    assert run["standalone"], "kopf peering needs its KopfPeering objects in the rules"
    return needs


def granted(rules):
    triples = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert not any("*" in t for t in triples), "no wildcards"
    return triples


@pytest.mark.parametrize("namespaces,rules", [([], RULES + CLUSTER_RULES), ([NS], RULES)], ids=["cluster", "namespaced"])
def test_rules_grant_exactly_what_the_operator_uses(monkeypatch, namespaces, rules):
    server = ApiServer()
    api = RecordingApi(answer=server.answer)
    memo, run = start_operator(monkeypatch, api, namespaces)
    lease_calls = [c for c in api.calls if "/leases" in c[1]]
    assert server.lease and server.lease["spec"]["holderIdentity"] == ""  # led, then released
    assert granted(LEADER_ELECTION_RULES) == set().union(*map(authorized, lease_calls))
    del api.calls[:]
    drive(memo, server)
    used = set().union(*map(authorized, api.calls))
    assert ("", "configmaps", "create") in used and ("llmop.dev", "llmdeployments/scale", "patch") in used  # it ran

    settings = kopf.OperatorSettings()
    handlers.configure(settings=settings, memo=memo)
    used |= kopf_needs(run, settings)
    have = granted(rules)
    assert not used - have, f"used but not granted (the operator would get 403s): {sorted(used - have)}"
    assert not have - used, f"granted but never used: {sorted(have - used)}"


def test_rules_are_one_per_resource_group():
    """Each (apiGroup, resource) in one rule, so a verb is added or removed in one place."""
    pairs = [(g, r) for rule in RULES + CLUSTER_RULES + LEADER_ELECTION_RULES for g in rule["apiGroups"]
             for r in rule["resources"]]  # fmt: skip
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize("namespace,kind,rules", [("", "ClusterRole", RULES + CLUSTER_RULES), (NS, "Role", RULES)])
def test_the_chart_renders_these_rules(namespace, kind, rules):
    """Without a cluster (tests/operator_cluster/test_chart.py checks them installed)."""
    import chart  # tests/operator/conftest.py puts it on the path

    docs = chart.template(f"watchNamespace={namespace}")
    if docs is None:
        pytest.skip("helm is not built (test_crd.py checks the chart's rule files are not stale)")
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    election = roles.pop("x-llmop-leader-election")  # release "x" in helm template's namespace
    assert election["kind"] == "Role" and election["rules"] == LEADER_ELECTION_RULES
    assert election["metadata"]["namespace"] == "default"  # the Lease's: the operator's own
    ((_, role),) = roles.items()
    assert role["kind"] == kind and role["rules"] == rules
