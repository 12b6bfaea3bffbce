"""Who may change the adapters an engine serves, and from where it may load them.

The admin API is not on the inference port at all; on its own listener it answers nothing without
the admin credential (checked before the body is read); and it loads only from `adapter_roots`,
refusing a path outside them, or a symlink or `..` leading out of them, with one 403 whose body is
the same whether or not the path exists.
"""

import os
import shutil

import httpx
import pytest

ADMIN_PATHS = [("POST", "/v1/adapters"), ("DELETE", "/v1/adapters/attn-r8"), ("GET", "/v1/adapters")]


@pytest.mark.parametrize("method,path", ADMIN_PATHS)
def test_the_inference_port_has_no_admin_api(lora_server, adapter_dirs, method, path):
    body = {"name": "sneaky", "source": str(adapter_dirs["qv-r4"])} if method == "POST" else None
    r = httpx.request(method, lora_server.url + path, json=body, timeout=300)
    assert r.status_code in (404, 405), r.text
    assert set(r.json()) == {"error"}
    models = {m["id"]: m for m in httpx.get(lora_server.url + "/v1/models").json()["data"]}
    assert "sneaky" not in models and "attn-r8" in models


def test_models_name_adapters_without_their_host_paths(lora_server, adapter_dirs):
    text = httpx.get(lora_server.url + "/v1/models").text
    assert not any(str(d) in text for d in adapter_dirs.values())


@pytest.mark.parametrize("method,path", ADMIN_PATHS)
@pytest.mark.parametrize("auth", [None, "Bearer wrong-credential-0123456789", "Bearer",
                                  "Basic bG9yYS1hZG1pbi1jcmVkZW50aWFsLTAxMjM0NTY3ODk=",
                                  "lora-admin-credential-0123456789"])
def test_the_admin_api_needs_the_credential(lora_server, adapter_dirs, method, path, auth):
    headers = {"Authorization": auth} if auth is not None else {}
    body = {"name": "sneaky", "source": str(adapter_dirs["qv-r4"])} if method == "POST" else None
    r = httpx.request(method, lora_server.admin_url + path, json=body, headers=headers, timeout=300)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"]["code"] == "invalid_admin_credential"
    assert "sneaky" not in {a["name"] for a in lora_server.admin.get("/v1/adapters").json()["data"]}
    assert lora_server.admin.get("/v1/adapters").status_code == 200  # and the right one gets in


def test_the_credential_is_checked_before_the_body(lora_server):
    r = httpx.post(lora_server.admin_url + "/v1/adapters", content=b"{not json",
                   headers={"content-type": "application/json"}, timeout=300)
    assert r.status_code == 401, r.text


@pytest.fixture(scope="module")
def outside(adapter_dirs, tmp_path_factory):
    """A valid adapter outside the roots, and links inside the root pointing out of it and within it."""
    root = next(iter(adapter_dirs.values())).parent
    away = tmp_path_factory.mktemp("outside") / "qv-copy"
    shutil.copytree(adapter_dirs["qv-r4"], away)
    links = {"escape": root / "escape", "inside": root / "inside"}
    os.symlink(away, links["escape"])
    os.symlink(adapter_dirs["qv-r4"], links["inside"])
    return {"away": away, **links}


def test_sources_outside_the_roots_are_refused_alike(lora_server, outside):
    root = lora_server.adapter_root
    refused = {
        "existing system dir": "/etc",
        "missing dir": "/no/such/dir",
        "valid adapter outside": str(outside["away"]),
        "symlink out of the root": str(outside["escape"]),
        "dot-dot out of the root": f"{root}/../{outside['away'].parent.name}/qv-copy",
        "root's parent": f"{root}/..",
        "relative": "qv-r4",
    }
    bodies = {}
    for why, source in refused.items():
        r = lora_server.admin.post("/v1/adapters", json={"name": "sneaky", "source": source})
        assert r.status_code == 403, (why, r.text)
        bodies[why] = r.json()
    assert len({repr(b) for b in bodies.values()}) == 1, bodies  # nothing tells them apart
    error = bodies["missing dir"]["error"]
    assert (error["param"], error["code"], error["type"]) == ("source", "source_not_allowed", "permission_error")
    assert "sneaky" not in {a["name"] for a in lora_server.admin.get("/v1/adapters").json()["data"]}


def test_a_symlink_within_the_root_loads_from_its_real_path(lora_server, outside, adapter_dirs):
    r = lora_server.admin.post("/v1/adapters", json={"name": "linked", "source": str(outside["inside"])})
    assert r.status_code == 201, r.text
    assert r.json()["source"] == os.path.realpath(adapter_dirs["qv-r4"])
    assert lora_server.admin.delete("/v1/adapters/linked").status_code == 204


def test_a_load_confined_to_a_root_stays_inside_it(lora_server, adapter_dirs, tmp_path_factory):
    """A tenant's directory on a shared volume: its sources, symlinks followed, must stay inside it."""
    root = lora_server.adapter_root
    tenant = root / f"tenant-{tmp_path_factory.mktemp('t').name}"
    shutil.copytree(adapter_dirs["qv-r4"], tenant / "mine")
    os.symlink(adapter_dirs["attn-r8"], tenant / "theirs")  # another tenant's files, through a link
    post = lambda name, source, within: lora_server.admin.post(  # noqa: E731
        "/v1/adapters", json={"name": name, "source": str(source), "root": str(within)})
    refused = {
        "a link out of the tenant's directory": post("sneaky", tenant / "theirs", tenant),
        "another directory of the volume": post("sneaky", adapter_dirs["attn-r8"], tenant),
        "dot-dot out of it": post("sneaky", f"{tenant}/../{adapter_dirs['attn-r8'].name}", tenant),
        "a root outside the adapter roots": post("sneaky", adapter_dirs["attn-r8"], "/"),
    }
    for why, r in refused.items():
        assert r.status_code == 403, (why, r.text)
        assert r.json()["error"]["code"] == "source_not_allowed"
    assert "sneaky" not in {a["name"] for a in lora_server.admin.get("/v1/adapters").json()["data"]}
    ok = post("confined", tenant / "mine", tenant)
    assert ok.status_code == 201, ok.text
    assert lora_server.admin.delete("/v1/adapters/confined").status_code == 204


def test_a_load_that_expects_another_rank_or_alpha_fails_with_both(lora_server, adapter_dirs):
    """What the operator sends for an LLMAdapter's spec.rank/alpha: the adapter must be that one."""
    import json

    alpha = json.loads((adapter_dirs["qv-r4"] / "adapter_config.json").read_text())["lora_alpha"]
    load = lambda name, **expect: lora_server.admin.post(  # noqa: E731
        "/v1/adapters", json={"name": name, "source": str(adapter_dirs["qv-r4"]), **expect})
    wrong = load("expects-r8", rank=8, alpha=alpha + 1)
    assert wrong.status_code == 422, wrong.text
    message = wrong.json()["error"]["message"]
    assert "rank 4, expected 8" in message and f"lora_alpha {alpha:g}, expected {alpha + 1:g}" in message
    listed = {a["name"]: a for a in lora_server.admin.get("/v1/adapters").json()["data"]}
    assert listed["expects-r8"]["state"] == "failed"  # listed with its reason, never served
    assert lora_server.admin.delete("/v1/adapters/expects-r8").status_code == 204
    right = load("expects-r4", rank=4, alpha=alpha)
    assert right.status_code == 201, right.text
    assert lora_server.admin.delete("/v1/adapters/expects-r4").status_code == 204
    assert load("bad-rank", rank=0).status_code == 400
