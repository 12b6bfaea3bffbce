"""Running the operator against a dev control plane, for the demo and the tests: as the chart's
pod on the real node (`OperatorPod`, the way users run it), or as a host process (`OperatorProcess`).

The host process authenticates *as the chart's ServiceAccount*, so what reconciles is exactly what
the chart grants; it is what most cluster tests use, because it starts in seconds from the working
tree (the pod needs its image built) and runs on planes without a real node. Either way the chart
is installed for real (CRD, ServiceAccount, RBAC, Deployment), and `OperatorSlot` keeps at most one
operator per plane for its process (the chart's pod is scaled to zero before a host operator starts;
two sessions on one plane each run their own, so they use separate namespaces).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from llmop.operator.api.conditions import get_condition

CHART = Path(__file__).resolve().parent.parent / "charts" / "llmop"
RELEASE, OPERATOR_NS = "llmop", "llmop-system"
SERVICE_ACCOUNT = "llmop"  # the chart's fullname for release "llmop"
CRD_NAMES = ("llmdeployments.llmop.dev", "llmadapters.llmop.dev")


def eventually(fn: Callable[[], Any], timeout: float = 180, interval: float = 0.5, what: str = "") -> Any:
    """fn()'s first truthy value; AssertionError with the last value when it never comes.

    A wait for a state, not a timed assertion: the timeout only bounds a hang."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as err:  # noqa: BLE001 - transient API states while converging
            last = err
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"never reached {what or fn}: last value {last!r}")


def kubectl_json(cluster, *args: str) -> dict[str, Any] | None:
    """`kubectl get … -o json` as a dict, None when it fails (not found)."""
    out = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The status condition of that type, or None."""
    return get_condition(((obj or {}).get("status") or {}).get("conditions") or [], type_)


def install_chart(cluster, *values: str, release: str = RELEASE, namespace: str = OPERATOR_NS) -> None:
    """helm upgrade --install of the chart (CRD, ServiceAccount, RBAC, operator Deployment)."""
    sets = [arg for v in values for arg in ("--set", v)]
    out = subprocess.run(
        [str(cluster.helm_path), "upgrade", "--install", release, str(CHART), "--namespace", namespace,
         "--create-namespace", *sets],
        capture_output=True, text=True, env=cluster.env(), timeout=180,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"helm install failed: {out.stderr}")
    for crd in CRD_NAMES:
        eventually(lambda: condition(kubectl_json(cluster, "crd", crd), "Established"), what=f"CRD {crd} established")


def service_account_kubeconfig(cluster, path: Path, account: str = SERVICE_ACCOUNT,
                               namespace: str = OPERATOR_NS) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount (a bound token, 24 h)."""
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=24h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [c for c in admin["clusters"] if c["name"] == ctx["cluster"]],
        "users": [{"name": "llmop-operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": ctx["cluster"], "user": "llmop-operator"}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


class OperatorProcess:
    """`llmop operator` as a child process; its log goes to a file."""

    def __init__(self, kubeconfig: Path, log: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()):
        self.kubeconfig, self.log, self.env, self.args = kubeconfig, log, env or {}, tuple(args)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONSAFEPATH": "1", **self.env}
        cmd = [sys.executable, "-m", "llmop.cli", "operator", "--kubeconfig", str(self.kubeconfig), "--liveness", "",
               *self.args]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd="/")

    def kill(self) -> None:
        """SIGKILL: an operator that dies mid-reconcile, with no chance to clean up."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""


class OperatorPod:
    """The chart's operator Deployment running `image` in a pod on the dev cluster's real node."""

    SELECTOR = f"app.kubernetes.io/name=llmop-operator,app.kubernetes.io/instance={RELEASE}"

    def __init__(self, cluster, image: str, engine_image: str):
        self.cluster, self.image, self.engine_image = cluster, image, engine_image

    def start(self) -> None:
        """Install the chart with one operator pod on this image; wait until it runs."""
        repository, tag = self.image.rsplit(":", 1)
        install_chart(self.cluster, "replicas=1", f"image.repository={repository}", f"image.tag={tag}",
                      "image.pullPolicy=Never", f"engineImage={self.engine_image}")  # fmt: skip
        eventually(self.ready, timeout=300, interval=1, what=f"operator pod on {self.image}")

    def pods(self) -> list[dict[str, Any]]:
        found = kubectl_json(self.cluster, "pods", "-n", OPERATOR_NS, "-l", self.SELECTOR) or {}
        return found.get("items", [])

    def ready(self) -> bool:
        pods = self.pods()
        return len(pods) == 1 and all(
            c.get("ready") and c.get("image", "").endswith(self.image.split("/", 1)[1])
            for c in pods[0]["status"].get("containerStatuses") or [{}])  # fmt: skip

    def stop(self) -> None:
        """Scale the Deployment to zero and wait until its pod is gone."""
        self.cluster.kubectl("scale", "deployment", RELEASE, "-n", OPERATOR_NS, "--replicas=0", check=False)
        eventually(lambda: not self.pods(), timeout=120, what="operator pod gone")

    def tail(self, n: int = 60) -> str:
        out = self.cluster.kubectl("logs", "-n", OPERATOR_NS, f"deployment/{RELEASE}", f"--tail={n}", check=False)
        return (out.stdout + out.stderr).strip()


class OperatorSlot:
    """At most one `llmop operator` on a dev plane at a time, for a test session.

    Two operators watching the same objects undo each other's writes: one rendering another
    engine image than the other makes the Deployment flip between two ReplicaSets forever. So
    asking for an operator with other settings stops the running one first; asking again for
    the same settings returns the running one (started again if it died). The chart's own
    Deployment runs zero pods unless `in_pod` asks for one."""

    def __init__(self, cluster, workdir: Path):
        self.cluster, self.workdir = cluster, workdir
        self.current: OperatorProcess | OperatorPod | None = None
        self._key: tuple | None = None
        self._started = 0
        self._chart = False

    def in_pod(self, image: str, engine_image: str) -> OperatorPod:
        """The chart's operator pod on `image` (loaded on the real node), rendering `engine_image`."""
        key = ("pod", image, engine_image)
        if isinstance(self.current, OperatorPod) and key == self._key and self.current.ready():
            return self.current
        self.stop()
        pod = OperatorPod(self.cluster, image, engine_image)
        self.current, self._key, self._chart = pod, key, False  # its values replace the default release's
        pod.start()
        return pod

    def run(self, env: dict[str, str] | None = None, args: tuple[str, ...] = (),
            account: str = SERVICE_ACCOUNT, namespace: str = OPERATOR_NS) -> OperatorProcess:
        """The operator running as ServiceAccount `namespace/account` with `env` and `args`; the
        chart's default release is installed first when that is its account (once)."""
        env = dict(env or {})
        key = (account, namespace, tuple(sorted(env.items())), tuple(args))
        if isinstance(self.current, OperatorProcess) and key == self._key:
            if self.current.proc is None or self.current.proc.poll() is not None:
                self.current.start()
            return self.current
        self.stop()
        if (account, namespace) == (SERVICE_ACCOUNT, OPERATOR_NS):
            if not self._chart:
                install_chart(self.cluster, "replicas=0")  # this process is the release's operator
                self._chart = True
        else:  # an operator pod another session (or the demo) left on a reused plane must not run beside it
            self.cluster.kubectl("scale", "deployment", RELEASE, "-n", OPERATOR_NS, "--replicas=0", check=False)
        self._started += 1
        work = self.workdir / f"operator-{self._started}"
        work.mkdir(parents=True, exist_ok=True)
        kubeconfig = service_account_kubeconfig(self.cluster, work / "kubeconfig", account, namespace)
        # KUBECONFIG too: kopf's login reads the kubernetes client's default path.
        proc = OperatorProcess(kubeconfig, work / "operator.log", {"KUBECONFIG": str(kubeconfig), **env}, args)
        proc.start()
        self.current, self._key = proc, key
        return proc

    def tail(self, n: int = 60) -> str:
        """The running operator's log tail ("" when none runs)."""
        return self.current.tail(n) if self.current is not None else ""

    def stop(self) -> None:
        try:
            if self.current is not None:
                self.current.stop()
        finally:
            self.current, self._key = None, None

