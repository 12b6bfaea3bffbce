"""What the pytest fixtures hand to tests: a handle on the running plane.

Why here and not in conftest.py: the fixtures stay three lines each, and the handle (kubeconfig,
server URL, the pinned kubectl) is importable by the demo or by other tooling too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import components, plane, runner


@dataclass(frozen=True)
class Cluster:
    """A running local control plane.

    `startup_seconds` is how long the `up` of this plane took (None only if it never recorded
    it); `reused` says whether this session found it already running.
    """

    kubeconfig: Path
    server: str
    startup_seconds: float | None = None
    reused: bool = False

    @property
    def kubectl_path(self) -> Path:
        return components.binary("kubectl")

    @property
    def helm_path(self) -> Path:
        return components.binary("helm")

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the pinned kubectl against this plane; text output; raises on failure if `check`."""
        proc = subprocess.run(
            [str(self.kubectl_path), *args], input=input, capture_output=True, text=True,
            env=self.env(), timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def api_client(self):
        """A `kubernetes.client.ApiClient` configured from the kubeconfig (caller closes it)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@contextlib.contextmanager
def session_cluster(report: Callable[[str], None] = print) -> Iterator[Cluster]:
    """Build if needed, start or join the plane, and leave it as found (see runner.acquire)."""
    layout = runner.default_layout()
    components.build(log=report)
    started = runner.acquire(layout, log=report)
    reused = started is None
    if reused:
        started = runner.recorded_startup_seconds(layout)
        report(f"dev cluster: reusing the running plane ({layout.kubeconfig}), which started in "
               f"{started if started is None else f'{started:.1f}s'}")
    else:
        report(f"dev cluster: start-up took {started:.1f}s (binaries cached)")
    try:
        yield Cluster(layout.kubeconfig, plane.server_url(plane.Ports()), started, reused)
    finally:
        if runner.release(layout):
            report("dev cluster: stopped")


@dataclass(frozen=True)
class RealNode:
    """The plane's real node, with the engine image loaded into its containerd."""

    name: str
    engine_image: str


def session_real_node(report: Callable[[str], None] = print) -> RealNode:
    """Start the real node on the running plane (if it is not up) and load the engine image;
    it stays until the plane stops."""
    from . import images, noderunner, realnode

    layout = runner.default_layout()
    with runner.locked(layout):
        noderunner.start(layout, log=report)
        ref = noderunner.load_image(layout, images.ENGINE, report)
    return RealNode(realnode.NODE_NAME, ref)


def session_operator_image(report: Callable[[str], None] = print) -> str:
    """Build (if needed) the operator image from Dockerfile.operator and load it into the real
    node's containerd (the node must be up: `session_real_node`)."""
    from . import images, noderunner

    layout = runner.default_layout()
    with runner.locked(layout):
        return noderunner.load_image(layout, images.OPERATOR, report)
