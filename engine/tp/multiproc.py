"""The executor of worker processes: one per tensor-parallel rank, stepped in lockstep.

Every step sends the same `ForwardBatch` to every rank (one pipe each) and waits for all of them:
rank 0 answers with the sampled tokens, the others with None once their share of the forward pass
(and its all-reduces) is done. The wait polls each pipe while checking that the process is alive,
and a watchdog thread checks liveness between steps too, so a dead or hung rank fails the executor
within about a second (a hang: within `worker_timeout_s`), never a request waiting forever.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from multiprocessing import connection
import os
import tempfile
import threading
import time

import torch

from llmop.engine.config import EngineConfig
from llmop.engine.executor import WorkerFailed
from llmop.engine.forward_batch import ForwardBatch
from llmop.engine.kv_cache import KVCacheSpec
from llmop.engine.model_runner import RankInfo
from llmop.engine.sampler import SampleResult
from llmop.engine.tp.worker import worker_main

log = logging.getLogger("llmop.engine")

START_TIMEOUT_S = 900.0  # loading a large checkpoint slice by slice may take minutes
WATCHDOG_PERIOD_S = 0.5


class MultiprocExecutor:
    def __init__(self, config: EngineConfig, kv_dtype: torch.dtype, eos_ids: tuple[int, ...]):
        self.size = config.tensor_parallel_size
        self.timeout = config.worker_timeout_s
        self._failure: str | None = None
        self._closed = False
        self._lock = threading.Lock()
        ctx = mp.get_context("spawn")
        self._dir = tempfile.TemporaryDirectory(prefix="llmop-tp-")
        init_method = f"file://{os.path.join(self._dir.name, 'rendezvous')}"
        self.conns, self.procs = [], []
        for rank in range(self.size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_main, name=f"llmop-rank{rank}", daemon=True,
                            args=(child, config, rank, self.size, init_method, kv_dtype, eos_ids,
                                  torch.get_num_threads()))
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)
        try:
            self._gather(max(START_TIMEOUT_S, self.timeout), "start")
        except WorkerFailed:
            self.shutdown()
            raise
        log.info("%d worker processes ready (pids %s)", self.size, [p.pid for p in self.procs])
        self._watchdog = threading.Thread(target=self._watch, name="llmop-worker-watchdog", daemon=True)
        self._watchdog.start()

    # --- the Executor interface -------------------------------------------------------------------

    def free_memory(self) -> int:
        return min(self._call("free_memory"))

    def allocate(self, spec: KVCacheSpec) -> None:
        self._call("allocate", spec)

    def execute(self, batch: ForwardBatch) -> SampleResult | None:
        return self._call("execute", batch)[0]

    def logits(self, batch: ForwardBatch) -> torch.Tensor:
        return self._call("logits", batch)[0]

    def describe(self) -> list[RankInfo]:
        return self._call("describe")

    @property
    def failure(self) -> str | None:
        return self._failure

    def shutdown(self) -> None:
        """Ask every worker to stop, then make sure: no process outlives this call."""
        with self._lock:
            self._closed = True
        for c in self.conns:
            try:
                c.send(("stop", ()))
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for c in self.conns:
            c.close()
        self._dir.cleanup()

    # --- plumbing -----------------------------------------------------------------------------------

    def _call(self, method: str, *args) -> list:
        if self._failure is not None or self._closed:
            raise WorkerFailed(self._failure or "the executor was shut down")
        for c in self.conns:
            try:
                c.send((method, args))
            except (BrokenPipeError, OSError) as e:
                self._fail(f"cannot reach a worker process: {e}")
        return self._gather(self.timeout, method)

    def _gather(self, timeout: float, what: str) -> list:
        """Every rank's answer, in rank order; WorkerFailed (after stopping every worker) when one
        dies, raises, or does not answer within `timeout` seconds. All pipes are watched at once:
        a rank that fails while the others wait in a collective is seen at once."""
        deadline = time.monotonic() + timeout
        values: dict[int, object] = {}
        while len(values) < self.size:
            if self._failure is not None:
                raise WorkerFailed(self._failure)
            pending = {self.conns[r]: r for r in range(self.size) if r not in values}
            for c in connection.wait(list(pending), timeout=0.05):
                rank, p = pending[c], self.procs[pending[c]]
                try:
                    status, value = c.recv()
                except (EOFError, OSError):
                    self._fail(f"worker process of rank {rank} (pid {p.pid}) closed its pipe during {what}")
                if status != "ok":
                    self._fail(f"rank {rank} failed during {what}:\n{value}")
                values[rank] = value
            for rank in pending.values():
                p = self.procs[rank]
                if rank not in values and not p.is_alive():
                    self._fail(f"worker process of rank {rank} (pid {p.pid}) exited with code {p.exitcode} during {what}")
            if time.monotonic() > deadline:
                late = [r for r in range(self.size) if r not in values]
                self._fail(f"rank {late[0]} (pid {self.procs[late[0]].pid}) did not answer {what} within {timeout:.0f} s")
        return [values[r] for r in range(self.size)]

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self._failure is None and not self._closed:
                self._failure = reason
                log.error("tensor-parallel executor failed: %s", reason)
                for p in self.procs:
                    if p.is_alive():
                        p.kill()
        raise WorkerFailed(self._failure or reason)

    def _watch(self) -> None:
        while self._failure is None and not self._closed:
            for rank, p in enumerate(self.procs):
                if not p.is_alive() and self._failure is None and not self._closed:
                    try:
                        self._fail(f"worker process of rank {rank} (pid {p.pid}) exited with code {p.exitcode}")
                    except WorkerFailed:
                        return
            time.sleep(WATCHDOG_PERIOD_S)
