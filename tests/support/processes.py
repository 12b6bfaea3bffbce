"""Real processes the end-to-end tests run on the host: a load generator and a Prometheus server
(Debian's `prometheus` package) that finds engine pods the way a cluster's Prometheus does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx

from llmop.operator.local import eventually
from llmop.serve_process import free_port


class Process:
    """A child process with its output in a log file; SIGTERM then SIGKILL on stop."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None):
        self.cmd, self.log = cmd, log
        self.proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


class Load:
    """A bounded load generator: `clients` threads each sending one completion after another
    until stopped (or `max_seconds` pass, so a failing test cannot leave load behind)."""

    def __init__(self, url: str, clients: int = 6, max_tokens: int = 24, max_seconds: float = 600):
        self.url, self.max_tokens = url, max_tokens
        self.deadline = time.monotonic() + max_seconds
        self.stopped = threading.Event()
        self.done = 0
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _client(self) -> None:
        with httpx.Client(timeout=120) as client:
            while not self.stopped.is_set() and time.monotonic() < self.deadline:
                r = client.post(self.url + "/v1/completions", json={
                    "prompt": "Kubernetes operators scale", "max_tokens": self.max_tokens,
                    "ignore_eos": True})
                r.raise_for_status()
                self.done += 1

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=180)


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)


class Prometheus(Process):
    """A real Prometheus scraping every second with the given scrape configs."""

    def __init__(self, workdir: Path, scrape_configs: list[dict]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "scrape_configs": scrape_configs}))  # JSON is YAML
        super().__init__([prometheus_binary(), f"--config.file={config}",
                          f"--storage.tsdb.path={workdir / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{self.port}"], workdir / "prometheus.log")
        eventually(self._ready, timeout=120, what="prometheus ready")

    @classmethod
    def pods_by_annotation(cls, workdir: Path, cluster, namespace: str) -> "Prometheus":
        """Prometheus scraping the namespace's pods annotated `prometheus.io/scrape: "true"` at
        their annotated port and path, the series labelled `pod`: the conventional relabelling of
        Kubernetes pod discovery (the operator's pod template sets the annotations).

        Debian's Prometheus is built without Kubernetes service discovery (its binary has file,
        docker and ec2 SD only), so `PodFileSD` lists the pods every second and writes them as
        file_sd targets carrying the `__meta_kubernetes_pod_*` labels Kubernetes SD gives; the
        relabelling below is the one a cluster's Prometheus runs."""
        meta = "__meta_kubernetes_pod_annotation_prometheus_io"
        targets = workdir / "pods.json"
        sd = PodFileSD(cluster, namespace, targets)
        try:
            prom = cls(workdir, [{
                "job_name": "llmop-engine-pods",
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
                "relabel_configs": [
                    {"source_labels": [f"{meta}_scrape"], "regex": "true", "action": "keep"},
                    {"source_labels": [f"{meta}_path"], "regex": "(.+)", "target_label": "__metrics_path__"},
                    {"source_labels": ["__meta_kubernetes_pod_ip", f"{meta}_port"], "separator": ":",
                     "target_label": "__address__"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }])  # fmt: skip
        except BaseException:
            sd.stop()
            raise
        prom.discovery = sd
        return prom

    def stop(self) -> None:
        if (sd := getattr(self, "discovery", None)) is not None:
            sd.stop()
        super().stop()

    def has_series(self, metric: str) -> bool:
        reply = httpx.get(self.url + "/api/v1/query", params={"query": metric}, timeout=5).json()
        return bool(reply.get("data", {}).get("result"))

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.tail()}")
        try:
            return httpx.get(self.url + "/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


class PodFileSD(threading.Thread):
    """Every second: the namespace's running pods with an IP, as file_sd target groups labelled
    the way Prometheus's Kubernetes pod discovery labels them (written atomically)."""

    def __init__(self, cluster, namespace: str, path: Path):
        super().__init__(daemon=True)
        self.cluster, self.namespace, self.path = cluster, namespace, path
        self.halt = threading.Event()
        self._write()  # Prometheus reads the file at start-up
        self.start()

    def groups(self) -> list[dict] | None:
        """The target groups, or None when the pods could not be listed (keep the last file)."""
        out = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "json", check=False)
        if out.returncode != 0:
            return None
        pods = json.loads(out.stdout).get("items", [])
        groups = []
        for pod in pods:
            ip = pod.get("status", {}).get("podIP")
            if not ip or pod["metadata"].get("deletionTimestamp"):
                continue
            labels = {"__meta_kubernetes_namespace": self.namespace,
                      "__meta_kubernetes_pod_name": pod["metadata"]["name"],
                      "__meta_kubernetes_pod_ip": ip}  # fmt: skip
            for key, value in (pod["metadata"].get("annotations") or {}).items():
                name = "".join(c if c.isalnum() else "_" for c in key)
                labels[f"__meta_kubernetes_pod_annotation_{name}"] = value
            groups.append({"targets": [f"{ip}:80"], "labels": labels})  # __address__ is relabelled
        return groups

    def _write(self) -> None:
        groups = self.groups()
        if groups is None and self.path.exists():
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups or []))
        tmp.replace(self.path)  # atomic: Prometheus never reads half a file

    def run(self) -> None:
        while not self.halt.wait(1.0):
            try:
                self._write()
            except (OSError, ValueError, subprocess.SubprocessError):
                continue  # one failed listing must not end discovery; the next second retries

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
