"""A rolling update of a real engine pod loses no request: editing `maxModelLen` renders a new
config (a new pod template); with `maxSurge: 1, maxUnavailable: 0` the new pod starts beside the
old one, joins the Service when its `/ready` passes, and the old pod leaves the endpoints during
its preStop sleep before SIGTERM makes it drain. A client sending requests through the Service
the whole time sees every one answered.

The client opens a new connection per request, as a load balancer in front of the Service would:
a kept-alive connection is pinned to its pod by conntrack and ends with that pod."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import yaml

from llmop.operator.local import eventually, kubectl_json

from pods import EXAMPLE, START_S, engine_pods, ready_pod, service_url, wait_ready

pytestmark = [pytest.mark.k8s, pytest.mark.realnode]


class Client(threading.Thread):
    """Chat completions through the Service, one after another, until stopped; every outcome kept."""

    def __init__(self, url: str, model: str):
        super().__init__(daemon=True)
        self.url, self.model = url, model
        self.outcomes: list[tuple[float, int | str]] = []  # (time, HTTP status or the error)
        self.halt = threading.Event()

    def run(self) -> None:
        body = {"model": self.model, "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": "Name a colour."}]}  # fmt: skip
        while not self.halt.is_set():
            try:
                with httpx.Client(timeout=120) as http:
                    reply = http.post(f"{self.url}/v1/chat/completions", json=body)
                self.outcomes.append((time.monotonic(), reply.status_code))
            except httpx.HTTPError as err:
                self.outcomes.append((time.monotonic(), f"{type(err).__name__}: {err}"))
            self.halt.wait(0.5)

    def failures(self) -> list[tuple[float, int | str]]:
        return [o for o in self.outcomes if o[1] != 200]


def test_editing_max_model_len_rolls_the_pod_with_no_failed_request(k8s_cluster, real_node, pod_ns):
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["rollout"] = {"maxSurge": 1, "maxUnavailable": 0}
    name = body["metadata"]["name"]
    k8s_cluster.kubectl("apply", "-n", pod_ns, "-f", "-", input=yaml.safe_dump(body))
    llmd = wait_ready(k8s_cluster, pod_ns, name)
    old = ready_pod(k8s_cluster, pod_ns, name)
    assert old is not None
    client = Client(service_url(k8s_cluster, pod_ns, name), llmd["status"]["model"])
    client.start()
    try:
        eventually(lambda: len(client.outcomes) >= 3, timeout=120, what="the client's first answers")
        k8s_cluster.kubectl("patch", "llmd", name, "-n", pod_ns, "--type=merge",
                            "-p", '{"spec": {"engine": {"maxModelLen": 1024}}}')  # fmt: skip
        new = eventually(lambda: (p := ready_pod(k8s_cluster, pod_ns, name))
                         and p["metadata"]["uid"] != old["metadata"]["uid"]
                         and len(engine_pods(k8s_cluster, pod_ns, name)) == 1 and p,
                         timeout=START_S, interval=2, what="the new pod alone and Ready")  # fmt: skip
        switched = time.monotonic()
        eventually(lambda: sum(t > switched for t, _ in client.outcomes) >= 3, timeout=120,
                   what="answers from the new pod")  # fmt: skip
    finally:
        client.halt.set()
        client.join(timeout=150)
    assert not client.failures(), client.failures()
    assert len(client.outcomes) >= 6
    assert new["spec"]["nodeName"] == real_node.name
    # The new pod runs the edited config.
    (cm,) = [v["configMap"]["name"] for v in new["spec"]["volumes"] if "configMap" in v]
    config = kubectl_json(k8s_cluster, "configmap", cm, "-n", pod_ns)
    assert any("max_model_len: 1024" in text for text in config["data"].values()), config["data"]
