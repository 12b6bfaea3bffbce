"""Manifest builders, without a cluster: what each LLMDeployment turns into."""

import pytest
import yaml

from llmop.engine.config import EngineConfig
from llmop.operator.build.desired import SpecError, desired_state
from llmop.operator.build.settings import Settings

SETTINGS = Settings(engine_image="engine:test")


def body(spec=None, name="chat"):
    return {"metadata": {"name": name, "namespace": "ml", "uid": "uid-1", "generation": 3}, "spec": spec or {}}


def objects(spec=None):
    return {o["kind"]: o for o in desired_state(body(spec), SETTINGS).objects}


def engine_config(objs) -> EngineConfig:
    return EngineConfig.model_validate(yaml.safe_load(objs["ConfigMap"]["data"]["engine.yaml"]))


def test_embedded_model_default():
    objs = objects()
    cfg = engine_config(objs)
    assert cfg.model is None and cfg.served_model_name == "chat" and cfg.tensor_parallel_size == 1
    assert cfg.host == "0.0.0.0" and cfg.max_model_len == 8192
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_70b_gets_four_gpus_and_its_engine_limits():
    objs = objects({
        "model": {"source": "hf://meta-llama/Meta-Llama-3-70B-Instruct"},
        "kvCache": {"concurrency": 100, "contextLength": 4096},
        "engine": {"maxNumSeqs": 128},
    })  # fmt: skip
    cfg = engine_config(objs)
    assert cfg.tensor_parallel_size == 4 and cfg.max_num_seqs == 128
    assert cfg.model == "/models/hf/meta-llama/Meta-Llama-3-70B-Instruct"
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    assert engine["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert engine["command"] == ["llmop", "serve", "--config", "/etc/llmop/engine.yaml"]
    assert pod["initContainers"][0]["command"][:3] == ["hf", "download", "meta-llama/Meta-Llama-3-70B-Instruct"]


def test_probes_drain_and_rollout():
    dep = objects({"engine": {"drainTimeoutSeconds": 60}})["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    assert pod["terminationGracePeriodSeconds"] == 5 + 60 + 10  # preStop + drain + margin
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "8000"


def test_replicas_come_from_spec():
    assert objects({"replicas": 3})["Deployment"]["spec"]["replicas"] == 3


def test_labels_and_owner_reference():
    for obj in objects().values():
        meta = obj["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "llmop"
        assert meta["labels"]["app.kubernetes.io/instance"] == "chat"
        (ref,) = meta["ownerReferences"]
        assert ref["kind"] == "LLMDeployment" and ref["uid"] == "uid-1" and ref["controller"] is True


def test_config_change_rolls_pods_and_nothing_else_does():
    def hash_of(spec):
        return objects(spec)["Deployment"]["spec"]["template"]["metadata"]["annotations"]["llmop.dev/config-hash"]

    assert hash_of({"engine": {"maxModelLen": 4096}}) != hash_of({"engine": {"maxModelLen": 2048}})
    assert hash_of({"replicas": 1}) == hash_of({"replicas": 5})


def test_sources_pvc_s3_and_adapters():
    objs = objects({
        "model": {"source": "pvc://weights/llama3-8b", "name": "meta-llama/Meta-Llama-3-8B"},
        "adapters": [{"name": "sql", "source": "s3://bucket/sql"}],
    })  # fmt: skip
    cfg = engine_config(objs)
    assert cfg.model == "/mnt/pvc/weights/llama3-8b"
    assert cfg.adapters[0].source == "/models/s3/bucket/sql"
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["weights"]
    assert pod["initContainers"][0]["name"] == "fetch-adapter-0"


def test_accelerator_placement():
    pod = objects({"accelerator": {"product": "NVIDIA-H100-80GB-HBM3", "nodeSelector": {"pool": "gpu"}}})[
        "Deployment"
    ]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_cpu_accelerator_requests_no_gpu_and_runs_the_engine_on_the_cpu():
    objs = objects({"accelerator": {"type": "cpu", "memoryPerGPU": "2Gi", "reservedMemory": "1Gi", "gpusPerNode": 1}})
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    (engine,) = pod["containers"]
    assert not any("gpu" in k for k in {**engine["resources"]["requests"], **engine["resources"]["limits"]})
    assert "tolerations" not in pod and "nodeSelector" not in pod
    assert engine_config(objs).device == "cpu"
    # A GPU pod leaves the device to the engine ("auto": CUDA where present).
    assert engine_config(objects()).device == "auto"


def test_cpu_accelerator_refuses_a_gpu_product():
    with pytest.raises(SpecError):
        objects({"accelerator": {"type": "cpu", "product": "NVIDIA-H100-80GB-HBM3"}})


def test_explicit_tolerations_replace_the_type_default():
    tol = [{"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}]
    pod = objects({"accelerator": {"tolerations": tol}})["Deployment"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == tol


@pytest.mark.parametrize(
    "spec,condition,reason",
    [
        ({"model": {"source": "pvc://x/unknown"}}, "SizingValid", "ArchitectureUnknown"),
        ({"model": {"source": "hf://meta-llama/Meta-Llama-3-70B"}, "kvCache": {"budgetTokens": 10_000_000}},
         "SizingValid", "DoesNotFit"),
        ({"engine": {"overrides": {"no_such_field": 1}}}, "Degraded", "InvalidEngineConfig"),
    ],
)  # fmt: skip
def test_spec_errors_build_nothing(spec, condition, reason):
    with pytest.raises(SpecError) as err:
        desired_state(body(spec), SETTINGS)
    assert (err.value.condition, err.value.reason) == (condition, reason)


def test_builders_are_deterministic():
    assert objects({"replicas": 2}) == objects({"replicas": 2})


def test_prefix_caching_is_the_engine_default_unless_the_spec_turns_it_off():
    assert engine_config(objects()).enable_prefix_caching is True
    assert engine_config(objects({"engine": {"enablePrefixCaching": False}})).enable_prefix_caching is False
    with pytest.raises(SpecError) as err:  # the typed field, not an override, decides it
        desired_state(body({"engine": {"overrides": {"enable_prefix_caching": False}}}), SETTINGS)
    assert "spec.engine.enablePrefixCaching" in str(err.value)


def test_speculation_is_rendered_from_the_typed_field_only():
    assert engine_config(objects()).speculative is None
    spec = engine_config(objects({"engine": {"speculative": {"numTokens": 3, "maxBatchSize": 4}}})).speculative
    assert (spec.method, spec.num_tokens, spec.max_batch_size) == ("ngram", 3, 4)
    with pytest.raises(SpecError) as err:
        desired_state(body({"engine": {"overrides": {"speculative": {"method": "ngram"}}}}), SETTINGS)
    assert "spec.engine.speculative" in str(err.value)


def test_no_admin_listener_without_a_credential_secret():
    objs = objects()
    cfg = engine_config(objs)
    assert (cfg.admin_port, cfg.admin_token_file) == (None, None)
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert [p["name"] for p in pod["containers"][0]["ports"]] == ["http"]
    assert not [v for v in pod["volumes"] if "secret" in v]


def test_admin_listener_and_its_credential_from_a_secret():
    objs = objects({"engine": {"adminCredentialSecret": "chat-admin", "adminPort": 9001}})
    cfg = engine_config(objs)
    assert (cfg.admin_host, cfg.admin_port) == ("0.0.0.0", 9001)
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    assert {"name": "admin", "containerPort": 9001, "protocol": "TCP"} in engine["ports"]
    (mount,) = [m for m in engine["volumeMounts"] if cfg.admin_token_file.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "chat-admin"
    assert volume["secret"]["items"] == [{"key": "token", "path": cfg.admin_token_file.rsplit("/", 1)[1]}]
    assert [p["port"] for p in objs["Service"]["spec"]["ports"]] == [8000]  # clients never reach it


def test_adapter_roots_are_the_mounted_source_volumes():
    from llmop.engine.lora.roots import AdapterRoots

    objs = objects({
        "model": {"source": "pvc://weights/llama3-8b", "name": "meta-llama/Meta-Llama-3-8B"},
        "adapters": [{"name": "sql", "source": "s3://bucket/sql"}, {"name": "tone", "source": "pvc://tenants/tone"}],
    })  # fmt: skip
    cfg = engine_config(objs)
    assert cfg.adapter_roots == ["/models", "/mnt/pvc/weights", "/mnt/pvc/tenants"]
    mounted = {m["mountPath"] for m in objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert set(cfg.adapter_roots) <= mounted
    roots = AdapterRoots.of(cfg.adapter_roots)
    for source in [cfg.model, *(a.source for a in cfg.adapters)]:
        assert roots.resolve(source) == source
    assert engine_config(objects()).adapter_roots == []  # the embedded model: nothing mounted, nothing loadable


@pytest.mark.parametrize("field", ["admin_port", "admin_host", "admin_token_file", "adapter_roots"])
def test_admin_fields_are_the_operators(field):
    with pytest.raises(SpecError) as err:
        desired_state(body({"engine": {"overrides": {field: None}}}), SETTINGS)
    assert err.value.reason == "InvalidEngineConfig" and f"engine.overrides.{field}" in str(err.value)


def test_an_admin_port_equal_to_the_inference_port_is_a_spec_error():
    with pytest.raises(SpecError) as err:
        desired_state(body({"engine": {"adminCredentialSecret": "chat-admin", "adminPort": 8000}}), SETTINGS)
    assert err.value.reason == "InvalidEngineConfig" and "admin_port must differ from port" in str(err.value)


# ---- pod security: every container the operator renders, and the chart's operator pod ----

def restricted_violations(pod: dict) -> list[str]:
    """What breaks the restricted Pod Security profile in a pod spec, per container (init containers
    included): runAsNonRoot, seccomp RuntimeDefault (own or the pod's), no privilege escalation, ALL
    capabilities dropped and none added, not privileged."""
    problems = []
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    for c in containers:
        sc = {**(pod.get("securityContext") or {}), **(c.get("securityContext") or {})}
        caps = sc.get("capabilities") or {}
        checks = {
            "runAsNonRoot": sc.get("runAsNonRoot") is True and sc.get("runAsUser", 1) != 0,
            "seccompProfile": sc.get("seccompProfile") == {"type": "RuntimeDefault"},
            "allowPrivilegeEscalation": sc.get("allowPrivilegeEscalation") is False,
            "capabilities": caps.get("drop") == ["ALL"] and not caps.get("add"),
            "privileged": not sc.get("privileged"),
        }
        problems += [f"{c['name']}: {name}" for name, ok in checks.items() if not ok]
    return problems


# Downloaders in init containers (with a credentials Secret), a PVC, and the admin listener.
FULL_SPEC = {"model": {"source": "hf://meta-llama/Meta-Llama-3-70B-Instruct", "credentialsSecret": "hf"},
             "adapters": [{"name": "sql", "source": "s3://bucket/sql"}, {"name": "tone", "source": "pvc://tenants/tone"}],
             "engine": {"adminCredentialSecret": "chat-admin"}}  # fmt: skip


@pytest.mark.parametrize("spec,inits", [
    ({}, []),  # the embedded model: the engine container alone
    (FULL_SPEC, ["fetch-model", "fetch-adapter-0"]),
    ({**FULL_SPEC, "engine": {**FULL_SPEC["engine"], "speculative": {
        "method": "draft", "draftModel": "s3://bucket/Meta-Llama-3-8B"}}},
     ["fetch-model", "fetch-adapter-0", "fetch-draft-model"]),  # a draft model's downloader too
])  # fmt: skip
def test_engine_pods_are_restricted(spec, inits):
    pod = objects(spec)["Deployment"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod.get("initContainers", [])] == inits
    assert restricted_violations(pod) == []


def test_the_charts_operator_pod_is_restricted():
    import chart  # tests/operator/conftest.py puts it on the path

    docs = chart.template()
    if docs is None:  # no helm built: the template's literal YAML
        dep = chart.read_template("deployment.yaml")
    else:
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    (operator,) = pod["containers"]
    assert operator["securityContext"]["readOnlyRootFilesystem"] is True  # it writes nothing


# ---- read-only root filesystem: the flag on every container, and an emptyDir wherever it writes ----

WRITABLE_ENV = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH")  # writable.py


def read_only_violations(pod: dict) -> list[str]:
    """What breaks a read-only root in a pod spec, per container: the flag unset; /tmp, or a path
    the environment sends writes to (HOME, TMPDIR, the caches), not on a writable emptyDir; bytecode
    written; and the engine's /dev/shm (NCCL) not an emptyDir."""
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    problems = []
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        writable = [m["mountPath"] for m in c.get("volumeMounts", [])
                    if m["name"] in empty_dirs and not m.get("readOnly")]  # fmt: skip

        def on_writable(path: str | None) -> bool:
            return bool(path) and any(path == w or path.startswith(w + "/") for w in writable)

        checks = {
            "readOnlyRootFilesystem": (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is True,
            "PYTHONDONTWRITEBYTECODE": env.get("PYTHONDONTWRITEBYTECODE") == "1",
            "/tmp": on_writable("/tmp"),
            **{k: on_writable(env.get(k)) for k in WRITABLE_ENV},
            **{k: on_writable(v) for k, v in env.items() if v and v.startswith("/")},
        }
        if c["name"] == "engine":
            checks["/dev/shm"] = on_writable("/dev/shm")
        problems += [f"{c['name']}: {name}" for name, ok in checks.items() if not ok]
    return problems


@pytest.mark.parametrize("spec", [{}, FULL_SPEC], ids=["embedded", "sources-and-admin"])
def test_engine_pods_have_a_read_only_root_and_write_only_to_empty_dirs(spec):
    pod = objects(spec)["Deployment"]["spec"]["template"]["spec"]
    assert read_only_violations(pod) == []
    (engine,) = pod["containers"]
    env = {e["name"]: e["value"] for e in engine["env"]}
    assert env["HOME"] == "/home/llmop" and env["TMPDIR"] == "/tmp"
    for c in pod.get("initContainers", []):  # the downloaders' caches on the models volume
        assert {e["name"]: e["value"] for e in c["env"]}["HOME"].startswith("/models/")


@pytest.mark.parametrize("break_it,problem", [
    (lambda c, pod: c["securityContext"].pop("readOnlyRootFilesystem"), "engine: readOnlyRootFilesystem"),
    (lambda c, pod: c["volumeMounts"].remove({"name": "tmp", "mountPath": "/tmp"}), "engine: /tmp"),
    (lambda c, pod: c["volumeMounts"].remove({"name": "home", "mountPath": "/home/llmop"}), "engine: HOME"),
    (lambda c, pod: pod["volumes"].remove({"name": "dshm", "emptyDir": {"medium": "Memory"}}), "engine: /dev/shm"),
    (lambda c, pod: c["env"].append({"name": "TRITON_CACHE_DIR", "value": "/opt/triton"}), "engine: TRITON_CACHE_DIR"),
])  # fmt: skip
def test_read_only_violations_are_found(break_it, problem):
    """The check above fails on a pod that lacks the flag or a mount its environment needs."""
    pod = objects()["Deployment"]["spec"]["template"]["spec"]
    break_it(pod["containers"][0], pod)
    assert problem in read_only_violations(pod)
