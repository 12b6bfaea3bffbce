"""`make demo`: the whole product in one command, on this machine.

1. start (or join) the local Kubernetes control plane built from Go modules (fake GPU nodes) and
   its real node (containerd + kubelet + kube-proxy), with the engine and operator images built
   from the repository's Dockerfiles and loaded;
2. install the Helm chart: its operator Deployment runs the operator image in a pod;
3. apply examples/smollm2.yaml (the embedded model, on the CPU) and wait until it is Ready: its
   engine pod passed its readiness probe;
4. show `kubectl get llmdeployments`, the pod and the sizing plan;
5. send a chat request through the OpenAI API to the LLMDeployment's Service.

Where the machine cannot run the real node (not root, no containerd), the demo says why and falls
back to what it did before pods were real: the operator as a host process with the chart's
ServiceAccount, the deployment on a kwok GPU node, and one engine process on this host started
with the very config the pod got.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from llmop.operator.local import OperatorSlot, condition, eventually, kubectl_json
from llmop.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "smollm2.yaml"
NAMESPACE = "llmop-demo"
SERVER_MODULE = "llmop.engine.server.cli"


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def local_engine_config(pod_yaml: str) -> tuple[dict, dict]:
    """The pod's engine config with what must differ on this machine; returns (config, overrides)."""
    config = yaml.safe_load(pod_yaml)
    overrides = {"host": "127.0.0.1", "device": "auto", "kv_cache_memory_bytes": 256 * 2**20}
    return config | overrides, {k: (config.get(k), v) for k, v in overrides.items()}


def chat_with_engine(config_yaml: str, model: str, workdir: Path) -> int:
    """Run `llmop serve --config` and send one chat request; 0 on an answer."""
    if importlib.util.find_spec(SERVER_MODULE) is None:
        print(f"engine server unavailable: {SERVER_MODULE} (`llmop serve`) is not in this tree yet; "
              "skipping the local chat request")  # fmt: skip
        return 0
    config, overrides = local_engine_config(config_yaml)
    path = workdir / "engine.yaml"
    path.write_text(yaml.safe_dump(config))
    print("the pod's engine config, with local overrides (key: pod -> local; the port: a free one):")
    for key, (pod, local) in overrides.items():
        print(f"  {key}: {pod} -> {local}")
    try:
        server = ServeProcess(["--config", str(path)], log=workdir / "engine.log", ready_timeout_s=600)
    except RuntimeError as err:
        print(f"engine did not become ready: {err}")
        return 1
    with server:
        from openai import OpenAI

        client = OpenAI(base_url=f"{server.url}/v1", api_key="none")
        t0 = time.monotonic()
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say hello to Kubernetes in one sentence."}],
            max_tokens=40, temperature=0,
        )  # fmt: skip
        print(f"chat completion in {time.monotonic() - t0:.2f}s: {reply.choices[0].message.content!r}")
        return 0


def chat_through_service(cluster, name: str, model: str) -> int:
    """One chat request to the LLMDeployment's Service (ClusterIP, routed by kube-proxy)."""
    from openai import OpenAI

    svc = kubectl_json(cluster, "service", name, "-n", NAMESPACE)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    base = f"http://{svc['spec']['clusterIP']}:{port}/v1"
    print(f"Service {name}: {base}")
    t0 = time.monotonic()
    reply = OpenAI(base_url=base, api_key="none").chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello to Kubernetes in one sentence."}],
        max_tokens=40, temperature=0,
    )  # fmt: skip
    print(f"chat completion in {time.monotonic() - t0:.2f}s: {reply.choices[0].message.content!r}")
    return 0


def real_node_images() -> tuple[str, str] | None:
    """Start the real node and load the (engine, operator) images; None (and why) where this
    machine cannot."""
    from llmop.devcluster import noderunner
    from llmop.devcluster.testing import session_operator_image, session_real_node

    missing = noderunner.prerequisites()
    if missing:
        print("no real node on this machine (" + "; ".join(missing) + "): the engine pod goes to a kwok "
              "node and a local engine process answers instead")  # fmt: skip
        return None
    return session_real_node().engine_image, session_operator_image()


def main() -> int:
    from llmop.devcluster.testing import session_cluster

    with tempfile.TemporaryDirectory(prefix="llmop-demo-") as tmp, session_cluster() as cluster:
        work = Path(tmp)
        step("the real node: containerd, kubelet, kube-proxy, and the images of Dockerfile.engine and Dockerfile.operator")
        images = real_node_images()
        image = images[0] if images else None
        slot = OperatorSlot(cluster, work)
        try:
            if images:
                step("install the Helm chart: CRD, ServiceAccount, RBAC, and the operator's pod")
                slot.in_pod(images[1], image)
                print(cluster.kubectl("get", "pods", "-n", "llmop-system", "-o", "wide").stdout)
            else:
                step("install the Helm chart, and run the operator here as the chart's ServiceAccount")
                slot.run()
            body = yaml.safe_load(EXAMPLE.read_text())
            if image is None:
                del body["spec"]["accelerator"]  # a (fake) GPU node instead of the real CPU node
            step(f"apply {EXAMPLE.relative_to(ROOT)} (the embedded SmolLM2-135M)")
            cluster.kubectl("create", "namespace", NAMESPACE, check=False)
            print(cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(body)).stdout.strip())
            name = body["metadata"]["name"]
            t0 = time.monotonic()
            obj = eventually(
                lambda: (d := kubectl_json(cluster, "llmd", name, "-n", NAMESPACE))
                and (condition(d, "Ready") or {}).get("status") == "True" and d,
                timeout=900, interval=2, what=f"{name} Ready",
            )  # fmt: skip
            print(f"Ready after {time.monotonic() - t0:.1f}s")
            step("kubectl get llmdeployments,pods")
            print(cluster.kubectl("get", "llmdeployments,pods", "-n", NAMESPACE, "-o", "wide").stdout)
            step("the sizing plan (llmop size -f examples/smollm2.yaml)")
            print(subprocess.run([sys.executable, "-m", "llmop.cli", "size", "-f", str(EXAMPLE)],
                                 capture_output=True, text=True).stdout)  # fmt: skip
            print(f"status.sizing.summary: {obj['status']['sizing']['summary']}")
            if image is not None:
                step("a chat request through the Service, answered by the engine pod")
                return chat_through_service(cluster, name, obj["status"]["model"])
            step("one real engine process with the config the pod got, and a chat request")
            cm = kubectl_json(cluster, "configmap", f"{name}-engine", "-n", NAMESPACE)
            return chat_with_engine(cm["data"]["engine.yaml"], obj["status"]["model"], work)
        except AssertionError as err:
            print(f"{err}\noperator log:\n{slot.tail()}")
            return 1
        finally:
            slot.stop()


if __name__ == "__main__":
    sys.exit(main())
