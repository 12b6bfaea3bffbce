"""The `llmop` command: one entry point whose subcommands live beside the code they drive.

Each subcommand module is imported only when it runs, so `llmop size` or `llmop operator` never
import torch, and `llmop serve` never imports kopf.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Each module defines `configure(parser)` and `run(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("llmop.engine.cli", "generate text offline with the engine"),
    "serve": ("llmop.engine.server.cli", "run the OpenAI-compatible engine server"),
    "operator": ("llmop.operator.cli", "run the Kubernetes operator"),
    "size": ("llmop.operator.sizing_cli", "print the tensor-parallel sizing plan for a model"),
    "dev-cluster": ("llmop.devcluster.cli", "a local Kubernetes control plane built from Go modules"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = argparse.ArgumentParser(prog="llmop", description=__doc__.splitlines()[0])
    names = top.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in SUBCOMMANDS.items():
        names.add_parser(name, help=help_, add_help=False)
    if not argv or argv[0] not in SUBCOMMANDS:
        top.parse_args(argv or ["--help"])
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    parser = argparse.ArgumentParser(prog=f"llmop {argv[0]}", description=module.__doc__)
    module.configure(parser)
    return int(module.run(parser.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
