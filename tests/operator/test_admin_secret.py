"""The admin credential Secret the operator makes for spec.tenancy: created when absent, checked
on every reconcile, never another's adopted."""

import pytest
from kubernetes.client.exceptions import ApiException

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build.errors import SpecError, SpecReason
from llmop.operator.build.meta import Owner
from llmop.operator.build.settings import Settings
from llmop.operator.build.tenancy import operator_made_secret
from llmop.operator.kube.client import Kube
from llmop.operator.reconcile.reconciler import Reconciler

from kube_fakes import RecordingApi  # tests/operator/conftest.py puts it on the path

OWNER = Owner("chat", "ml", "uid-now")


def reconciler_with(stored):
    api = RecordingApi(answer=lambda verb, path, query, body: (404, {}) if stored is None and verb == "GET"
                       else (201, body) if verb == "POST" else (200, stored))  # fmt: skip
    return Reconciler(Kube(api), Settings(engine_image="engine:test")), api


def secret():
    return operator_made_secret(OWNER, LLMDeploymentSpec.model_validate({"tenancy": {}}))


def test_made_with_a_random_token_only_for_tenancy_without_a_named_secret():
    a, b = secret(), secret()
    assert a["metadata"]["name"] == "chat-admin" and a["stringData"]["token"] != b["stringData"]["token"]
    assert a["metadata"]["ownerReferences"][0]["uid"] == "uid-now"
    named = {"tenancy": {}, "engine": {"adminCredentialSecret": "mine"}}
    assert operator_made_secret(OWNER, LLMDeploymentSpec.model_validate(named)) is None
    assert operator_made_secret(OWNER, LLMDeploymentSpec()) is None


def test_created_when_absent_and_left_alone_when_ours():
    rec, api = reconciler_with(None)
    rec._create_once(secret(), OWNER)
    assert [c[0] for c in api.calls] == ["GET", "POST"]
    rec, api = reconciler_with({"metadata": {"ownerReferences": [{"kind": "LLMDeployment", "uid": "uid-now"}]}})
    rec._create_once(secret(), OWNER)
    assert [c[0] for c in api.calls] == ["GET"]


def test_a_previous_incarnations_secret_waits_for_the_garbage_collector():
    rec, _ = reconciler_with({"metadata": {"ownerReferences": [
        {"kind": "LLMDeployment", "name": "chat", "uid": "uid-before"}]}})
    with pytest.raises(ApiException) as err:  # retried by the handler, not a spec error
        rec._create_once(secret(), OWNER)
    assert err.value.status == 409


def test_someone_elses_secret_of_that_name_is_a_spec_error():
    rec, api = reconciler_with({"metadata": {"name": "chat-admin"}, "data": {"token": "c2VjcmV0"}})
    with pytest.raises(SpecError) as err:
        rec._create_once(secret(), OWNER)
    assert err.value.reason is SpecReason.ADMIN_SECRET_CONFLICT and "adminCredentialSecret" in str(err.value)
    assert [c[0] for c in api.calls] == ["GET"]
