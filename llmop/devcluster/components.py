"""Which Go binaries the local control plane needs, pinned, and how they are built and cached.

Why build from Go modules: the build and CI machines have no container engine (no kind, no k3d)
but do reach the Go module proxy, and the real kube-apiserver, controllers and scheduler are
what the operator must be tested against. Each component is built from a small wrapper module
under `gomod/<name>/` (committed go.mod + go.sum: the wrapper pins every k8s.io staging module that
`k8s.io/kubernetes` requires at v0.0.0, and the go.sum pins the content). Binaries land in
`<cache>/bin/<name>-<version>-<hash of the wrapper and flags>/`, never in the repository, so a
version bump or a flag change builds a fresh directory and an unchanged one is reused at once.

The pure part (`Component`, `build_command`, `cache_key`) is separate from `build`, which runs Go.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

GOMOD_DIR = Path(__file__).parent / "gomod"

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v4.3.2"


def cache_root() -> Path:
    """Everything built or downloaded lives here (override with LLMOP_CACHE); CI keeps it warm."""
    return Path(os.environ.get("LLMOP_CACHE", Path.home() / ".cache" / "llmop"))


def _kube_version_ldflags(version: str) -> tuple[str, ...]:
    """Stamp the version the way upstream's hack/lib/version.sh does; unstamped binaries report
    v0.0.0-master, which kubectl's skew warning, helm's kubeVersion checks and kwok trip over."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags: list[str] = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.gitCommit=0000000000000000000000000000000000000000",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


@dataclass(frozen=True)
class Component:
    """One wrapper module and the binaries built from it in a single `go build` call (so the
    packages they share compile once)."""

    name: str
    version: str
    packages: tuple[str, ...]
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # Extra files copied out of the module cache next to the binaries: (module@version path, name).
    extra_files: tuple[tuple[str, str], ...] = field(default=())
    # Binaries renamed after the build: (go's name, ours). Go names a binary after the last
    # path element that is not a major-version suffix, so etcd's server/v3 comes out as "server".
    renames: tuple[tuple[str, str], ...] = ()
    # Only built when asked for: the real node's binaries (see `realnode`).
    optional: bool = False

    @property
    def module_dir(self) -> Path:
        return GOMOD_DIR / self.name

    @property
    def binaries(self) -> tuple[str, ...]:
        renames = dict(self.renames)
        return tuple(renames.get(n, n) for n in map(go_binary_name, self.packages))


def go_binary_name(package: str) -> str:
    """The file name `go build -o DIR/` gives a main package's binary."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and parts[-1][:1] == "v" and parts[-1][1:].isdigit():
        return parts[-2]
    return parts[-1]


_KWOK_STAGES = "sigs.k8s.io/kwok@{v}/kustomize/stage"

COMPONENTS: tuple[Component, ...] = (
    Component(
        name="kubernetes",
        version=KUBERNETES_VERSION,
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{b}"
            for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        ),
        ldflags=_kube_version_ldflags(KUBERNETES_VERSION),
        tags=("selinux", "notest"),
    ),
    # The real node: its own wrapper (same pins, plus the go.sum lines the kubelet's and
    # kube-proxy's extra packages need), so adding it did not rebuild the control plane.
    Component(
        name="kubelet",
        version=KUBERNETES_VERSION,
        packages=("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-proxy"),
        ldflags=_kube_version_ldflags(KUBERNETES_VERSION),
        tags=("selinux", "notest"),
        optional=True,
    ),
    # The etcd binary's main package is the server module itself.
    Component(
        name="etcd",
        version=ETCD_VERSION,
        packages=("go.etcd.io/etcd/server/v3",),
        renames=(("server", "etcd"),),
    ),
    Component(
        name="kwok",
        version=KWOK_VERSION,
        packages=("sigs.k8s.io/kwok/cmd/kwok",),
        # kwok's "fast" stage set (what kustomize/stage/fast composes), rendered as one file at up.
        extra_files=tuple(
            (f"{_KWOK_STAGES.format(v=KWOK_VERSION)}/{path}", name)
            for path, name in (
                ("node/fast/node-initialize.yaml", "stage-node-initialize.yaml"),
                ("node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", "stage-node-heartbeat.yaml"),
                ("pod/fast/pod-ready.yaml", "stage-pod-ready.yaml"),
                ("pod/fast/pod-complete.yaml", "stage-pod-complete.yaml"),
                ("pod/fast/pod-delete.yaml", "stage-pod-delete.yaml"),
            )
        ),
    ),
    Component(
        name="helm",
        version=HELM_VERSION,
        packages=("helm.sh/helm/v4/cmd/helm",),
        ldflags=(
            f"-X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",
            "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
        ),
    ),
)


def go_env(root: Path) -> dict[str, str]:
    """Module and build caches under the llmop cache so they persist with it; static binaries;
    two compile jobs (the machines have 2 cores and the linker wants ~2 GiB per binary)."""
    return {
        "GOMODCACHE": str(root / "gomod"),
        "GOCACHE": str(root / "gocache"),
        "GOFLAGS": "-p=2 -mod=readonly",
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": "local",
    }


def cache_key(component: Component) -> str:
    """`<name>-<version>-<12 hex>`: the hash covers the wrapper go.mod/go.sum and the build flags."""
    h = hashlib.sha256()
    for fname in ("go.mod", "go.sum"):
        h.update((component.module_dir / fname).read_bytes())
    h.update(repr((component.packages, component.ldflags, component.tags, component.extra_files,
                   component.renames)).encode())
    return f"{component.name}-{component.version}-{h.hexdigest()[:12]}"


def build_command(component: Component, out_dir: Path) -> list[str]:
    """The one `go build` that produces all of a component's binaries into out_dir."""
    cmd = ["go", "build", "-trimpath", "-buildvcs=false"]
    if component.tags:
        cmd += ["-tags", ",".join(component.tags)]
    cmd += ["-ldflags", " ".join(("-s", "-w") + component.ldflags)]
    cmd += ["-o", str(out_dir) + os.sep, *component.packages]
    return cmd


def bin_dir(component: Component, root: Path | None = None) -> Path:
    return (root or cache_root()) / "bin" / cache_key(component)


def is_built(component: Component, root: Path | None = None) -> bool:
    d = bin_dir(component, root)
    return (d / ".complete").exists()


def binary(name: str, root: Path | None = None) -> Path:
    """Path of a built binary (e.g. "kube-apiserver", "etcd", "kwok", "kubectl", "helm")."""
    for c in COMPONENTS:
        if name in c.binaries:
            return bin_dir(c, root) / name
    raise KeyError(name)


def extra_file(name: str, root: Path | None = None) -> Path:
    for c in COMPONENTS:
        if name in (n for _, n in c.extra_files):
            return bin_dir(c, root) / name
    raise KeyError(name)


def build(root: Path | None = None, log=print, optional: bool = False) -> dict[str, float]:
    """Build whatever is missing, one component at a time (never two Go builds at once);
    the optional components (the real node's) only when `optional`.

    Returns seconds spent per component built; an empty dict means everything was cached.
    The output directory is filled under a temporary name and renamed when complete, so an
    interrupted build is never mistaken for a finished one.
    """
    root = root or cache_root()
    env = {**os.environ, **go_env(root)}
    spent: dict[str, float] = {}
    for c in COMPONENTS:
        final = bin_dir(c, root)
        if is_built(c, root) or (c.optional and not optional):
            continue
        if shutil.which("go") is None:
            raise RuntimeError("`go` is not on PATH; Go >= 1.26 is needed to build the control plane")
        tmp = final.with_name(final.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        log(f"building {c.name} {c.version} -> {final} ({', '.join(c.binaries)})")
        start = time.monotonic()
        subprocess.run(build_command(c, tmp), cwd=c.module_dir, env=env, check=True)
        for go_name, name in c.renames:
            (tmp / go_name).rename(tmp / name)
        for src, name in c.extra_files:
            shutil.copyfile(Path(env["GOMODCACHE"]) / src, tmp / name)
        (tmp / ".complete").write_text(f"{c.name} {c.version}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        spent[c.name] = time.monotonic() - start
        log(f"built {c.name} in {spent[c.name]:.0f}s")
    return spent


if __name__ == "__main__":  # pragma: no cover - `llmop dev-cluster build` is the interface
    build()
    sys.exit(0)
