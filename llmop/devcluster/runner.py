"""The thin shell that runs the plane described in `plane`: spawn, wait, register nodes, stop.

Why processes with pidfiles rather than a supervisor: there is nothing to install and nothing
left behind. Each component runs in its own session (process group) with its output in
`<state>/logs/<name>.log`; `<state>/pids/<name>` holds "pid starttime", so `down` kills exactly
the processes it started (a recycled pid has another start time) — the whole group, TERM then
KILL. `up` first cleans whatever a previous, interrupted run left. Test sessions share a running
plane through lease files (`acquire`/`release`): a plane started by the CLI is never stopped by
tests; one started by a test session is stopped by the last session that leaves.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

from . import components, pki, plane
from .plane import Layout, Ports

START_TIMEOUT_S = 180.0  # generous: a cold page cache on a busy 2-core machine
STOP_TIMEOUT_S = 15.0


class ClusterError(RuntimeError):
    """The plane failed to start or to answer; the message names the log to read."""


def default_layout() -> Layout:
    return Layout(Path(os.environ.get("LLMOP_CLUSTER_DIR", components.cache_root() / "cluster")))


# --- processes ----------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), or None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _read_pidfile(path: Path) -> tuple[int, str] | None:
    try:
        pid, start = path.read_text().split()
        return int(pid), start
    except (OSError, ValueError):
        return None


def _alive(path: Path) -> int | None:
    """The pid recorded in `path` if that very process is still running."""
    entry = _read_pidfile(path)
    if entry and _start_time(entry[0]) == entry[1]:
        return entry[0]
    return None


def _spawn(layout: Layout, proc: plane.Process) -> subprocess.Popen:
    exe = Path(proc.binary) if os.path.isabs(proc.binary) else components.binary(proc.binary)
    if not exe.exists():
        raise ClusterError(f"{exe} is missing; run `llmop dev-cluster build` first")
    log = open(layout.logs / f"{proc.name}.log", "wb")
    try:
        child = subprocess.Popen(
            [str(exe), *proc.args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=layout.state_dir,
            start_new_session=True,  # its own process group: `down` signals the whole group
        )
    finally:
        log.close()
    (layout.pids / proc.name).write_text(f"{child.pid} {_start_time(child.pid)}\n")
    return child


def _stop_one(pidfile: Path) -> bool:
    """TERM the recorded process group, wait, KILL if it lingers; True if it was running."""
    pid = _alive(pidfile)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(pidfile) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pidfile) is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    return pid is not None


def _stop_all(layout: Layout) -> list[str]:
    """Stop the real node if it runs (its containers too), then every recorded process group in
    reverse start order, one at a time. One at a time because the API server's graceful shutdown
    stalls when etcd vanishes under it (all at once took the full timeout)."""
    from . import noderunner

    stopped: list[str] = []
    if not layout.pids.exists():
        return stopped
    stopped += noderunner.stop(layout)
    names = [p.name for p in plane.processes(layout, Ports())][::-1]
    files = [layout.pids / n for n in names] + sorted(set(layout.pids.iterdir()) - {layout.pids / n for n in names})
    for f in files:
        if _stop_one(f):
            stopped.append(f.name)
    return stopped


# --- talking to it ------------------------------------------------------------------------


def _admin_context(layout: Layout) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
    return ctx


def _insecure_context() -> ssl.SSLContext:
    """For the controller-manager's and scheduler's /healthz: self-signed serving certs on loopback."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _http(url: str, ctx: ssl.SSLContext | None = None, method: str = "GET", body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def api(layout: Layout, ports: Ports, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict | str]:
    """One request to the API server as the admin; returns (status, decoded JSON or text)."""
    status, raw = _http(plane.server_url(ports) + path, _admin_context(layout), method, body)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def log_tail(layout: Layout, name: str, lines: int = 25) -> str:
    """The last lines of a component's log file."""
    try:
        return "\n".join((layout.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(what: str, check, layout: Layout, watch: list[str], deadline: float) -> None:
    """Poll `check()` until true; fail early, with the log tail, if a watched process died."""
    while True:
        if check():
            return
        for name in watch:
            if _alive(layout.pids / name) is None:
                raise ClusterError(f"{name} exited while waiting for {what}; {layout.logs / (name + '.log')}:\n{log_tail(layout, name)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}; logs in {layout.logs}")
        time.sleep(0.2)


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# --- up / down / status -------------------------------------------------------------------


@contextlib.contextmanager
def locked(layout: Layout) -> Iterator[None]:
    """One `up`/`down`/lease change at a time, across processes (several test sessions may race)."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    with open(layout.lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def running(layout: Layout, ports: Ports = Ports()) -> dict[str, int | None]:
    """Each process name -> its pid if alive."""
    return {p.name: _alive(layout.pids / p.name) for p in plane.processes(layout, ports)}


def pid_of(layout: Layout, name: str) -> int | None:
    """The pid (and process group) of the plane's process `name`, None if it is not running."""
    return _alive(layout.pids / name)


def restart_process(layout: Layout, name: str, ports: Ports = Ports(), timeout: float = START_TIMEOUT_S) -> None:
    """Stop the plane's process `name` (SIGTERM, SIGKILL if it lingers), start it again with the
    same arguments and wait until the API server is ready again."""
    proc = next(p for p in plane.processes(layout, ports) if p.name == name)
    with locked(layout):
        _stop_one(layout.pids / name)
        _spawn(layout, proc)
        _wait("kube-apiserver /readyz", lambda: api(layout, ports, "/readyz")[0] == 200, layout, [name],
              time.monotonic() + timeout)  # fmt: skip


def healthy(layout: Layout, ports: Ports = Ports()) -> bool:
    """All processes alive and the API server ready."""
    if not all(running(layout, ports).values()):
        return False
    return api(layout, ports, "/readyz")[0] == 200


def _write_kubeconfigs(layout: Layout, ports: Ports) -> None:
    ca = (layout.pki / "ca.crt").read_bytes()
    server = plane.server_url(ports)
    for client in pki.CLIENTS:
        cfg = plane.kubeconfig(
            server, ca,
            (layout.pki / f"{client.file_stem}.crt").read_bytes(),
            (layout.pki / f"{client.file_stem}.key").read_bytes(),
            client.user,
        )
        path = layout.kubeconfig if client.file_stem == "admin" else layout.component_kubeconfig(client.file_stem)
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)


def _write_kwok_config(layout: Layout) -> None:
    names = [n for c in components.COMPONENTS for _, n in c.extra_files]
    texts = [components.extra_file(n).read_text() for n in names]
    layout.kwok_config.write_text(plane.kwok_stage_documents(texts))


def up(layout: Layout | None = None, ports: Ports = Ports(), nodes: list[plane.NodeSpec] | None = None,
       owner: str = "cli", log=print) -> float:
    """Start the plane (after cleaning any leftovers) and return the seconds it took to be usable:
    API server ready, controllers and scheduler healthy, every fake node Ready and untainted,
    the `default` ServiceAccount created."""
    layout = layout or default_layout()
    nodes = plane.default_nodes() if nodes is None else nodes
    start = time.monotonic()
    _stop_all(layout)
    busy = [f"{name}={port}" for name, port in ports.all().items() if _port_in_use(port)]
    if busy:
        raise ClusterError(f"ports already in use on 127.0.0.1: {', '.join(busy)}")
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    for d in (layout.logs, layout.pids):
        d.mkdir(parents=True, exist_ok=True)
    layout.owner.write_text(owner + "\n")
    pki.ensure_pki(layout.pki, plane.SERVICE_IP)
    _write_kubeconfigs(layout, ports)
    _write_kwok_config(layout)
    deadline = start + START_TIMEOUT_S
    procs = {p.name: p for p in plane.processes(layout, ports)}
    try:
        _spawn(layout, procs["etcd"])
        etcd_health = f"http://127.0.0.1:{ports.etcd_client}/health"
        _wait("etcd", lambda: b'"true"' in _http(etcd_health)[1], layout, ["etcd"], deadline)
        _spawn(layout, procs["kube-apiserver"])
        _wait("kube-apiserver /readyz", lambda: api(layout, ports, "/readyz")[0] == 200,
              layout, ["etcd", "kube-apiserver"], deadline)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            _spawn(layout, procs[name])
        for spec in nodes:
            status, body = api(layout, ports, "/api/v1/nodes", "POST", plane.node_manifest(spec))
            if status not in (201, 409):
                raise ClusterError(f"creating node {spec.name}: HTTP {status}: {body}")
        watch = list(procs)
        for name, port in (("kube-controller-manager", ports.controller_manager), ("kube-scheduler", ports.scheduler)):
            url = f"https://127.0.0.1:{port}/healthz"
            _wait(f"{name} /healthz", lambda url=url: _http(url, _insecure_context())[0] == 200, layout, watch, deadline)

        def nodes_ready() -> bool:
            status, body = api(layout, ports, "/api/v1/nodes")
            items = body.get("items", []) if status == 200 and isinstance(body, dict) else []
            ok = {n["metadata"]["name"] for n in items if plane.node_is_schedulable(n)}
            return {s.name for s in nodes} <= ok

        _wait("fake nodes Ready", nodes_ready, layout, watch, deadline)
        _wait("the default ServiceAccount",
              lambda: api(layout, ports, "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
              layout, watch, deadline)
    except BaseException:
        _stop_all(layout)
        raise
    seconds = time.monotonic() - start
    (layout.state_dir / "startup-seconds").write_text(f"{seconds:.2f}\n")
    log(f"dev cluster up in {seconds:.1f}s: {plane.server_url(ports)}, kubeconfig {layout.kubeconfig}")
    return seconds


def recorded_startup_seconds(layout: Layout) -> float | None:
    """How long the `up` of the plane now running took, as it recorded it; None if unrecorded."""
    try:
        return float((layout.state_dir / "startup-seconds").read_text())
    except (OSError, ValueError):
        return None


def down(layout: Layout | None = None) -> list[str]:
    """Stop every process of the plane and drop its etcd data; PKI and kubeconfig stay."""
    layout = layout or default_layout()
    stopped = _stop_all(layout)
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    shutil.rmtree(layout.users, ignore_errors=True)
    layout.owner.unlink(missing_ok=True)
    return stopped


# --- sharing between test sessions --------------------------------------------------------


def _live_users(layout: Layout) -> list[Path]:
    if not layout.users.exists():
        return []
    live = []
    for f in layout.users.iterdir():
        if _alive(f) is not None:
            live.append(f)
        else:
            f.unlink(missing_ok=True)
    return live


def acquire(layout: Layout | None = None, ports: Ports = Ports(), log=print) -> float | None:
    """Use the running plane, or start one owned by test sessions. Registers this process as a
    user. Returns the start-up seconds if this call started it, None if it was already running."""
    layout = layout or default_layout()
    with locked(layout):
        started = None
        if not healthy(layout, ports):
            started = up(layout, ports, owner="pytest", log=log)
        layout.users.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        (layout.users / str(pid)).write_text(f"{pid} {_start_time(pid)}\n")
        return started


def release(layout: Layout | None = None) -> bool:
    """Drop this process's lease; stop the plane if test sessions started it and none remain.
    Returns True if it was stopped."""
    layout = layout or default_layout()
    with locked(layout):
        (layout.users / str(os.getpid())).unlink(missing_ok=True)
        owner = layout.owner.read_text().strip() if layout.owner.exists() else ""
        if owner == "pytest" and not _live_users(layout):
            down(layout)
            return True
        return False
