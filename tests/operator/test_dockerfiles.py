"""The images cannot be built here (no Docker engine), so lint what a build would trip on.

An image build fails when a COPY source is missing or when setuptools is handed a package whose
folder the build stage never copied; both are checked against pyproject.toml itself.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile.operator", "Dockerfile.engine"]


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    text = (ROOT / dockerfile).read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _copied_sources(dockerfile: str) -> list[str]:
    """Sources of COPY instructions that read the build context (not another stage)."""
    sources = []
    for word, args in _instructions(dockerfile):
        if word != "COPY" or "--from=" in args:
            continue
        parts = [p for p in args.split() if not p.startswith("--")]
        sources.extend(parts[:-1])
    return sources


def _package_dirs() -> list[Path]:
    """Folder of every package that pyproject.toml tells setuptools to build."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = tool["package-dir"]
    dirs = []
    for package in tool["packages"]:
        parts = package.split(".")
        for n in range(len(parts), 0, -1):
            prefix = ".".join(parts[:n])
            if prefix in mapping:
                dirs.append(Path(mapping[prefix], *parts[n:]))
                break
        else:
            dirs.append(Path(*parts))
    return dirs


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_every_copy_source_exists(dockerfile):
    sources = _copied_sources(dockerfile)
    assert sources, f"{dockerfile} copies nothing from the build context"
    for source in sources:
        if source == ".":
            continue
        assert (ROOT / source).exists(), f"{dockerfile}: COPY {source} does not exist"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_build_stage_copies_every_package(dockerfile):
    sources = [Path(s.rstrip("/")) for s in _copied_sources(dockerfile)]
    if Path(".") in sources:
        return
    for package_dir in _package_dirs():
        covered = any(package_dir == s or s in package_dir.parents for s in sources)
        assert covered, f"{dockerfile}: pip install needs {package_dir}/, which is never copied"
        assert (ROOT / package_dir / "__init__.py").exists(), f"{package_dir} is not a package"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_image_runs_as_non_root(dockerfile):
    users = [args for word, args in _instructions(dockerfile) if word == "USER"]
    assert users, f"{dockerfile} never sets USER"
    assert users[-1].split(":")[0] not in {"0", "root"}, f"{dockerfile} ends as root"


def test_engine_image_user_is_the_one_engine_pods_run_as():
    """Engine pods run as Dockerfile.engine's user, with an emptyDir at its home (their root is
    read-only): both must follow the Dockerfile."""
    from llmop.operator.build.pod import ENGINE_UID
    from llmop.operator.build.writable import ENGINE_HOME

    instructions = _instructions("Dockerfile.engine")
    (useradd,) = [args for word, args in instructions if word == "RUN" and "useradd" in args]
    uid, user = re.search(r"useradd --uid (\d+) --create-home (\S+)", useradd).groups()
    assert int(uid) == ENGINE_UID and f"/home/{user}" == ENGINE_HOME
    assert [args for word, args in instructions if word == "USER"][-1] == f"{ENGINE_UID}:{ENGINE_UID}"


def test_operator_image_installs_no_torch():
    runs = " ".join(args for word, args in _instructions("Dockerfile.operator") if word == "RUN")
    assert "[operator]" in runs and "[engine]" not in runs
    assert "torch" in runs, "the operator image should assert that torch is never imported"


def test_dockerignore_keeps_local_state_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv"):
        assert path in ignored
