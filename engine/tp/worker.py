"""A worker process: one tensor-parallel rank's `ModelRunner`, driven over a pipe by the core.

Protocol: the core sends `(method, args)`; the worker answers `("ok", value)` or `("error",
traceback)`. `stop`, or the core's end of the pipe closing (the core died), ends the worker, so no
worker outlives its engine; a rank left inside a collective by a dead core gives up after
`worker_timeout_s` (the process group's timeout) and then sees the closed pipe. SIGINT is ignored:
the core decides when workers stop (a Ctrl-C in a terminal reaches the whole process group).
"""

from __future__ import annotations

import signal
import traceback


def worker_main(conn, config, rank: int, size: int, init_method: str, kv_dtype, eos_ids, threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import datetime

    import torch

    from llmop.engine.device_caps import rank_threads, resolve_device
    from llmop.engine.model_runner import ModelRunner
    from llmop.engine.tp.shard import RankShard

    try:
        on_cpu = resolve_device(config.device).type == "cpu"
        if on_cpu:
            torch.set_num_threads(rank_threads(threads, size))
        group = None
        if size > 1:
            backend = "gloo" if on_cpu else "nccl"
            if backend == "nccl":
                torch.cuda.set_device(rank)  # before the group: NCCL binds each rank to its current device
            torch.distributed.init_process_group(backend, init_method=init_method, rank=rank, world_size=size,
                                                 timeout=datetime.timedelta(seconds=config.worker_timeout_s))
            group = torch.distributed.group.WORLD
        runner = ModelRunner(config, RankShard(rank, size), kv_dtype, eos_ids, group)
    except BaseException:
        _send(conn, ("error", traceback.format_exc()))
        return
    _send(conn, ("ok", None))
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            break  # the core is gone
        if method == "stop":
            _send(conn, ("ok", None))
            break
        try:
            if method in ("execute", "logits") and rank != 0:
                value = runner.execute(*args)  # the other ranks only join the all-reduces
            else:
                value = getattr(runner, method)(*args)
            _send(conn, ("ok", value))
        except BaseException:
            _send(conn, ("error", traceback.format_exc()))
    if size > 1 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _send(conn, message) -> None:
    try:
        conn.send(message)
    except (BrokenPipeError, OSError):
        pass
