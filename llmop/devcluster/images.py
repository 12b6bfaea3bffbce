"""The dev cluster's container images, built here from the project's own Dockerfiles.

Why built locally: the machines reach Debian's mirror and PyPI but no container registry. So the
base is a Debian root file system made with debootstrap, the pause image is upstream's pause.c
(from the Kubernetes module already downloaded) compiled statically, and the engine and operator
images are `buildah bud` of Dockerfile.engine / Dockerfile.operator with `--build-arg BASE=` that
base. Each image is tagged with a hash of what went into it (the Dockerfile, the build context's
files, the base), so an unchanged tree reuses it at once; then it is copied into the node's
containerd, where the kubelet finds it (pods never pull: the tags are not on any registry).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import components
from .realnode import K8S_NAMESPACE, PAUSE_IMAGE

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = f"localhost/llmop/debian:{DEBIAN_SUITE}"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CA_PATH = "/run/llmop-build-ca.crt"
PAUSE_SOURCE = f"k8s.io/kubernetes@{components.KUBERNETES_VERSION}/build/pause/linux/pause.c"


@dataclass(frozen=True)
class ImageSpec:
    """One image built from a Dockerfile of this repository."""

    name: str
    dockerfile: str
    # What the Dockerfile COPYs: the tag hashes these (and the Dockerfile), not the whole tree.
    sources: tuple[str, ...] = ("pyproject.toml", "README.md", "llmop", "engine", "kernels", "operator")

    def repository(self) -> str:
        return f"localhost/llmop/{self.name}"


ENGINE = ImageSpec("engine", "Dockerfile.engine")
OPERATOR = ImageSpec("operator", "Dockerfile.operator")


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for p in patterns:
        p = p.strip("/")
        if p.startswith("**/"):
            if any(Path(x).match(p[3:]) for x in parts) or Path(rel).match(p[3:]):
                return True
        elif parts[0] == p or Path(rel).match(p) or rel.startswith(p + "/"):
            return True
    return False


def context_files(root: Path = ROOT) -> list[str]:
    """The build context's files as the tag's hash sees them: what git tracks or would track
    (so local caches are out), less what .dockerignore leaves out of the context."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                         capture_output=True, check=True).stdout.decode()  # fmt: skip
    ignore = root / ".dockerignore"
    patterns = [line.strip() for line in (ignore.read_text().splitlines() if ignore.exists() else [])
                if line.strip() and not line.startswith("#")]  # fmt: skip
    return sorted(f for f in out.split("\0") if f and (root / f).is_file() and not _ignored(f, patterns))


def content_tag(spec: ImageSpec, base: str, root: Path = ROOT) -> str:
    """12 hex digits over the Dockerfile, the context files it copies (path and bytes), the base."""
    h = hashlib.sha256(f"{spec.dockerfile}\0{base}\0".encode())
    for rel in context_files(root):
        if rel != spec.dockerfile and not any(rel == s or rel.startswith(s + "/") for s in spec.sources):
            continue
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_ref(spec: ImageSpec, base: str = BASE_IMAGE, root: Path = ROOT) -> str:
    return f"{spec.repository()}:{content_tag(spec, base, root)}"


# --- the shell ----------------------------------------------------------------------------


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def _buildah_has(ref: str) -> bool:
    return subprocess.run(["buildah", "inspect", "--type", "image", ref], capture_output=True).returncode == 0


def _commit_rootfs(ref: str, tar: Path, entrypoint: str, env_path: bool) -> None:
    ctr = _run(["buildah", "from", "scratch"]).stdout.strip()
    try:
        _run(["buildah", "add", ctr, str(tar), "/"])
        config = ["buildah", "config", "--entrypoint", f'["{entrypoint}"]']
        if env_path:
            config += ["--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "--cmd", ""]
        _run([*config, ctr])
        _run(["buildah", "commit", "-q", ctr, ref])
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)


def ensure_base(log: Callable[[str], None] = print) -> str:
    """Debian minbase from the mirror with debootstrap, as an image (once per machine)."""
    if _buildah_has(BASE_IMAGE):
        return BASE_IMAGE
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmop-debootstrap-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"debootstrap {DEBIAN_SUITE} (minbase) -> {BASE_IMAGE}")
        _run(["debootstrap", "--variant=minbase", "--include=ca-certificates", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR])
        tar = Path(tmp) / "rootfs.tar"
        _run(["tar", "-C", str(rootfs), "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
              "--exclude=./var/cache/apt/archives/*.deb", "--exclude=./var/lib/apt/lists/*", "-cf", str(tar), "."])  # fmt: skip
        _commit_rootfs(BASE_IMAGE, tar, "/bin/bash", env_path=True)
    log(f"base image in {time.monotonic() - start:.0f}s")
    return BASE_IMAGE


def ensure_pause(log: Callable[[str], None] = print) -> str:
    """The sandbox ("pause") image containerd starts first in every pod."""
    if _buildah_has(PAUSE_IMAGE):
        return PAUSE_IMAGE
    source = components.cache_root() / "gomod" / PAUSE_SOURCE
    if not source.exists():
        raise FileNotFoundError(f"{source}: run `llmop dev-cluster build` first (it downloads the module)")
    with tempfile.TemporaryDirectory(prefix="llmop-pause-") as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        _run(["gcc", "-Os", "-static", "-DVERSION=llmop-dev", "-o", str(root / "pause"), str(source)])
        tar = Path(tmp) / "pause.tar"
        _run(["tar", "-C", str(root), "-cf", str(tar), "."])
        _commit_rootfs(PAUSE_IMAGE, tar, "/pause", env_path=False)
    log(f"built {PAUSE_IMAGE}")
    return PAUSE_IMAGE


def ensure_built(spec: ImageSpec, log: Callable[[str], None] = print, root: Path = ROOT) -> str:
    """`buildah bud` of the spec's Dockerfile on the local Debian base, unless already built."""
    base = ensure_base(log)
    ref = image_ref(spec, base, root)
    if _buildah_has(ref):
        return ref
    log(f"building {ref} from {spec.dockerfile} (base {base})")
    start = time.monotonic()
    trust: list[str] = []
    if HOST_CA_BUNDLE.exists():  # this machine's CAs (a TLS-inspecting proxy's among them)
        trust = ["--volume", f"{HOST_CA_BUNDLE}:{BUILD_CA_PATH}:ro", "--build-arg", f"PIP_CERT={BUILD_CA_PATH}"]
    proc = subprocess.run(
        ["buildah", "bud", "--isolation", "chroot", "--layers", "-f", spec.dockerfile,
         "--build-arg", f"BASE={base}", *trust, "-t", ref, "."],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"building {ref} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    log(f"built {ref} in {time.monotonic() - start:.0f}s")
    return ref


def _ctr(socket: Path, *args: str) -> list[str]:
    return ["ctr", "--address", str(socket), "--namespace", K8S_NAMESPACE, *args]


def in_containerd(socket: Path, ref: str) -> bool:
    return ref in _run(_ctr(socket, "images", "ls", "-q")).stdout.split()


def load_into_containerd(socket: Path, ref: str, log: Callable[[str], None] = print) -> None:
    """Copy a buildah image into the node's containerd (its k8s.io namespace), once."""
    if in_containerd(socket, ref):
        return
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmop-image-", dir=components.cache_root()) as tmp:
        archive = Path(tmp) / "image.tar"
        _run(["buildah", "push", "-q", ref, f"docker-archive:{archive}:{ref}"])
        _run(_ctr(socket, "images", "import", "--no-unpack=false", str(archive)))
    log(f"loaded {ref} into containerd in {time.monotonic() - start:.0f}s")


def prune(socket: Path, spec: ImageSpec, keep: str) -> None:
    """Drop older builds of an image from buildah's storage and the node's containerd (each
    engine image is gigabytes; a changed tree builds a new one)."""
    listed = subprocess.run(["buildah", "images", "--format", "{{.Name}}:{{.Tag}}"], capture_output=True, text=True)
    for ref in listed.stdout.split():
        if ref != keep and ref.startswith(spec.repository() + ":"):
            subprocess.run(["buildah", "rmi", "-f", ref], capture_output=True)
    stale = [r for r in _run(_ctr(socket, "images", "ls", "-q")).stdout.split()
             if r.startswith(spec.repository() + ":") and r != keep]  # fmt: skip
    if stale:
        subprocess.run(_ctr(socket, "images", "rm", *stale), capture_output=True)


def tools_missing() -> list[str]:
    """Programs the images and the real node need, from Debian's packages."""
    return [t for t in ("buildah", "debootstrap", "gcc", "ctr", "containerd", "runc", "iptables", "ip")
            if shutil.which(t) is None]  # fmt: skip
