"""The generated CRD: structural, described, defaulted, and the committed YAML not stale."""

import pytest
from pydantic import ValidationError

from llmop.operator import crdgen
from llmop.operator.api import LLMDeploymentSpec
from llmop.operator.crd.manifest import build_adapter_crd, build_crd
from llmop.operator.crd.openapi import walk

CRD = build_crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
ADAPTER_SCHEMA = build_adapter_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
BOTH = pytest.mark.parametrize("schema", [SCHEMA, ADAPTER_SCHEMA], ids=["llmdeployment", "llmadapter"])


def test_committed_yaml_is_not_stale():
    assert crdgen.stale() == [], "run `make crds`"


@BOTH
def test_every_field_has_a_description(schema):
    # metadata is the API server's own: it refuses anything but `type: object` there (v1.36).
    missing = [p for p, node in walk(schema) if "description" not in node and not p.endswith("[]")]
    assert missing == [".metadata"], missing


@BOTH
def test_structural_no_forbidden_keywords(schema):
    for path, node in walk(schema):
        assert not {"$ref", "title", "const", "anyOf", "oneOf", "allOf"} & set(node), path
        assert node.get("type") != "null", path
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        ), path


def test_defaults_ranges_enums_and_cel():
    spec = SCHEMA["properties"]["spec"]["properties"]
    assert spec["replicas"]["default"] == 1 and spec["replicas"]["minimum"] == 0
    assert spec["kvCache"]["default"] == {}
    assert spec["kvCache"]["properties"]["dtype"]["enum"] == ["auto", "float32", "bfloat16", "float16", "fp8_e4m3"]
    assert spec["model"]["properties"]["quantization"]["enum"] == ["auto", "none", "int8", "fp16"]
    assert spec["model"]["properties"]["quantization"]["default"] == "auto"  # the engine's choice per node
    rules = [r["rule"] for r in spec["kvCache"]["x-kubernetes-validations"]]
    assert any("budgetTokens" in r and "concurrency" in r for r in rules)
    assert spec["parallelism"]["properties"]["tensor"]["x-kubernetes-int-or-string"] is True
    assert spec["autoscaling"]["x-kubernetes-validations"]  # min <= max from the autoscaler's model
    assert spec["adapters"]["x-kubernetes-list-type"] == "map"
    assert "default" not in spec["accelerator"]["properties"]["tolerations"]  # by type, in the builder
    assert spec["accelerator"]["properties"]["type"]["enum"] == ["gpu", "cpu"]


def test_subresources_printer_columns_names():
    assert VERSION["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert "status" in VERSION["subresources"]
    names = [c["name"] for c in VERSION["additionalPrinterColumns"]]
    assert names == ["Model", "TP", "Available", "Desired", "Queue-Wait", "Adapters", "Tenant-Adapters", "Ready", "Age"]
    assert CRD["spec"]["names"]["shortNames"] == ["llmd"]


@pytest.mark.parametrize(
    "spec",
    [
        {"kvCache": {"budgetTokens": 10, "concurrency": 2, "contextLength": 100}},
        {"kvCache": {"concurrency": 2}},
        {"model": {"source": "ftp://x"}},
        {"parallelism": {"tensor": "many"}},
        {"replicas": -1},
        {"unknownField": 1},
        {"engine": {"speculative": {"method": "draft"}}},
        {"engine": {"speculative": {"draftModel": "/models/draft"}}},
    ],
)
def test_operator_models_reject_what_the_schema_rejects(spec):
    # the mirror of the API server's checks (the CEL side is tested on the real API server)
    with pytest.raises(ValidationError):
        LLMDeploymentSpec.model_validate(spec)
