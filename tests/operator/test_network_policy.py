"""The engine pods' NetworkPolicy, without a cluster: inference traffic from anywhere, the admin port
from the operator's pods only, nothing else; and the chart gives the operator what it selects on."""

import re

import pytest

from llmop.operator.build.desired import desired_state
from llmop.operator.build.network_policy import OPERATOR_POD_LABELS
from llmop.operator.build.settings import Settings
from llmop.operator.kube.identity import ObjectKey

ADMIN = {"adminCredentialSecret": "chat-admin", "adminPort": 9001}


def objects(spec, settings=Settings()):
    body = {"metadata": {"name": "chat", "namespace": "ml", "uid": "uid-1"}, "spec": spec}
    return {o["kind"]: o for o in desired_state(body, settings).objects}


def admitted_ports(policy):
    return {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}


@pytest.mark.parametrize("engine", [{}, {"port": 9000}, ADMIN], ids=["default", "port", "admin"])
def test_it_selects_the_engine_pods_and_admits_exactly_their_ports(engine):
    objs = objects({"engine": engine})
    policy, template = objs["NetworkPolicy"], objs["Deployment"]["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: downloads
    (engine_container,) = template["spec"]["containers"]
    assert admitted_ports(policy) == {p["containerPort"] for p in engine_container["ports"]}
    assert all(p["protocol"] == "TCP" for rule in policy["spec"]["ingress"] for p in rule["ports"])


def test_inference_port_is_open_to_every_source_and_is_where_prometheus_scrapes():
    objs = objects({"engine": {"port": 9000}})
    (rule,) = objs["NetworkPolicy"]["spec"]["ingress"]
    assert "from" not in rule and rule["ports"] == [{"port": 9000, "protocol": "TCP"}]
    annotations = objs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9000" and annotations["prometheus.io/path"] == "/metrics"


def test_admin_port_is_open_to_the_operators_pods_in_its_namespace_only():
    objs = objects({"engine": ADMIN}, Settings(operator_namespace="ops"))
    inference, admin = objs["NetworkPolicy"]["spec"]["ingress"]
    assert "from" not in inference and [p["port"] for p in inference["ports"]] == [8000]
    assert admin["ports"] == [{"port": 9001, "protocol": "TCP"}]
    # One peer holding both selectors: the operator's pods in its namespace. Two peers would admit
    # every pod of that namespace, and pods with the operator's labels in any namespace.
    assert admin["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "llmop-operator"}}}]


def test_turned_off_it_is_not_built_and_is_named_for_deletion():
    body = {"metadata": {"name": "chat", "namespace": "ml", "uid": "uid-1"},
            "spec": {"networkPolicy": {"enabled": False}}}
    desired = desired_state(body, Settings())
    assert "NetworkPolicy" not in {o["kind"] for o in desired.objects}
    assert desired.absent == (ObjectKey("networking.k8s.io/v1", "NetworkPolicy", "ml", "chat"),)
    assert desired_state({**body, "spec": {}}, Settings()).absent == ()  # on by default


def test_the_operator_namespace_setting_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert Settings.from_env().operator_namespace == "llmop-system"
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert Settings.from_env().operator_namespace == "ops"


def _operator_deployment():
    import chart  # tests/operator/conftest.py puts it on the path

    docs = chart.template()
    if docs is None:  # no helm built: the template's literal YAML
        return None, chart.read_template("deployment.yaml")
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    return docs, dep


def test_the_chart_tells_the_operator_its_namespace():
    _, dep = _operator_deployment()
    (operator,) = dep["spec"]["template"]["spec"]["containers"]
    (var,) = [e for e in operator["env"] if e["name"] == "POD_NAMESPACE"]
    assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_the_charts_operator_pods_carry_the_labels_the_policy_admits():
    import chart

    docs, dep = _operator_deployment()
    if docs is not None:
        labels = dep["spec"]["template"]["metadata"]["labels"]
    else:  # no helm built: the pod template includes "llmop.labels"; read their literal lines
        template = (chart.CHART / "templates" / "deployment.yaml").read_text()
        assert re.search(r'template:\s+metadata:\s+labels:\s+\{\{- include "llmop.labels"', template)
        helpers = (chart.CHART / "templates" / "_helpers.tpl").read_text()
        body = re.search(r'define "llmop.labels" -}}(.*?){{- end', helpers, re.S).group(1)
        labels = dict(re.findall(r"^([\w./-]+): ([\w.-]+)$", body, re.M))
    assert OPERATOR_POD_LABELS.items() <= labels.items()
