"""`llmop serve`: the OpenAI-compatible server on one engine (the embedded model by default).

Settings come from `--config FILE` (the EngineConfig YAML the operator writes into the pod's
ConfigMap), then from flags, one per EngineConfig field (`--max-num-seqs 8`; a section such as
`--speculative '{method: ngram, num_tokens: 4}'` takes YAML; a list of strings such as
`--adapter-roots /models /mnt/pvc` takes several values), which override the file. With
`admin_port` the adapter admin API listens there (docs/security.md). Exits 0 after a SIGTERM drain.
"""

from __future__ import annotations

import argparse
import logging
import os
import types
import typing

import yaml
from pydantic import BaseModel

from llmop.engine.config import EngineConfig

_SCALARS = (int, float, str, bool)
log = logging.getLogger(__name__)


def _flag_fields() -> dict[str, type]:
    """EngineConfig fields that take one scalar value, a section (YAML) or a list of strings; lists
    of sections such as adapters go in the file."""
    out = {}
    for name, f in EngineConfig.model_fields.items():
        ann = f.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)] if isinstance(
            ann, types.UnionType) or typing.get_origin(ann) is typing.Union else [ann]
        section = isinstance(args[0], type) and issubclass(args[0], BaseModel)
        if len(args) == 1 and (args[0] in _SCALARS or typing.get_origin(args[0]) is typing.Literal or section
                               or args[0] == list[str]):
            out[name] = args[0]
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="EngineConfig YAML/JSON file (flags override its fields)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    for name, typ in _flag_fields().items():
        field = EngineConfig.model_fields[name]
        choices = list(typing.get_args(typ)) if typing.get_origin(typ) is typing.Literal else None
        kwargs: dict = {"default": argparse.SUPPRESS, "dest": name,
                        "help": f"{field.description or name} (default: {field.default})"}
        if typ is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typ == list[str]:
            kwargs.update(nargs="*", metavar="VALUE")
        elif isinstance(typ, type) and issubclass(typ, BaseModel):
            kwargs.update(type=yaml.safe_load, metavar="YAML")
        else:
            kwargs.update(type=str, choices=choices)
        parser.add_argument("--" + name.replace("_", "-"), **kwargs)


def load_config(args: argparse.Namespace) -> EngineConfig:
    base = EngineConfig.from_file(args.config) if args.config else EngineConfig()
    overrides = {k: getattr(args, k) for k in _flag_fields() if hasattr(args, k)}
    return EngineConfig.model_validate({**base.model_dump(), **overrides})


def _leave_a_core(config: EngineConfig) -> None:
    import torch

    from llmop.engine.cpu_quota import cpu_budget, quota_cpus
    from llmop.engine.device_caps import resolve_device, serving_threads

    if resolve_device(config.device).type != "cpu":
        return
    default, quota = torch.get_num_threads(), quota_cpus()
    threads = serving_threads(default, os.environ.get("OMP_NUM_THREADS"), cpu_budget(quota=quota))
    if threads is None:
        log.info("torch CPU threads %d (OMP_NUM_THREADS)", default)
        return
    torch.set_num_threads(threads)
    limit = f", CPU limit {quota:g}" if quota is not None else ""
    log.info("torch CPU threads %d (torch's default %d%s): one left for the HTTP server and the engine loop "
             "(OMP_NUM_THREADS overrides)", threads, default, limit)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = load_config(args)
    _leave_a_core(config)
    from llmop.engine.engine import LLMEngine
    from llmop.engine.server.admin_app import create_admin_app
    from llmop.engine.server.app import create_app
    from llmop.engine.server.listeners import listen, served
    from llmop.engine.server.runner import DrainingServer, uvicorn_config

    engine = LLMEngine(config)
    try:
        app = create_app(engine, config)
        sock = listen(config.host, config.port)
        admin_app, admin_sock = None, None
        if config.admin_port is not None:
            admin_app, admin_sock = create_admin_app(app.state.llmop), listen(config.admin_host, config.admin_port)
        sockets = [s for s in (sock, admin_sock) if s is not None]
        try:
            asgi = served(app, admin_app, sock, admin_sock)
            server = DrainingServer(uvicorn_config(asgi, config.host, config.port, args.log_level),
                                    config.drain_timeout_s)
            server.run(sockets=sockets)
        finally:
            for s in sockets:
                s.close()
    finally:
        engine.shutdown()  # no worker process outlives the server
    return 0 if engine.failure is None else 1
