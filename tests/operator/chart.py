"""The Helm chart rendered without a cluster: `helm template` when the dev cluster's helm is built
(`llmop.devcluster`), else None."""

import re
import subprocess
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "llmop"


def helm_path() -> Path | None:
    from llmop.devcluster import components

    path = components.binary("helm")
    return path if path.exists() else None


def template(*values: str) -> list[dict] | None:
    """The chart's documents, each `values` a `--set` (None without helm)."""
    helm = helm_path()
    if helm is None:
        return None
    sets = [arg for v in values for arg in ("--set", v)]
    out = subprocess.run([str(helm), "template", "x", str(CHART), *sets], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def read_template(name: str) -> dict:
    """A template read as YAML with its directives dropped (`{{- … }}` lines) or blanked (inline
    ones): the literal parts, for when helm is not built."""
    lines = [line for line in (CHART / "templates" / name).read_text().splitlines()
             if not re.fullmatch(r"\s*\{\{-.*\}\}\s*", line)]  # fmt: skip
    return yaml.safe_load(re.sub(r"\{\{.*?\}\}", "x", "\n".join(lines)))
