"""Where the model runs: one `ModelRunner` per tensor-parallel rank, behind one interface.

`InProcessExecutor` runs a single rank in the engine's process (the default at TP=1).
`tp.multiproc.MultiprocExecutor` runs one worker process per rank (TP > 1, or `worker_processes`
at TP=1) and sends every rank the same `ForwardBatch`; rank 0 answers with the sampled tokens.
A worker that dies or stops answering makes the executor fail (`failure`), loudly and for good:
the engine stops stepping, `/health` turns unhealthy, and the pod restarts.
"""

from __future__ import annotations

from typing import Protocol

import torch

from llmop.engine.config import EngineConfig
from llmop.engine.forward_batch import ForwardBatch
from llmop.engine.kv_cache import KVCacheSpec
from llmop.engine.model_runner import ModelRunner, RankInfo
from llmop.engine.sampler import SampleResult
from llmop.engine.tp.shard import RankShard


class WorkerFailed(RuntimeError):
    """A rank died, hung past the worker timeout, or raised: the engine cannot step any more."""


class Executor(Protocol):
    def free_memory(self) -> int:
        """The smallest KV budget any rank can offer (bytes)."""
        ...

    def allocate(self, spec: KVCacheSpec) -> None:
        """Every rank allocates its KV cache for `spec` (per-rank blocks)."""
        ...

    def execute(self, batch: ForwardBatch) -> SampleResult | None:
        """Run one step on every rank; rank 0's sampled tokens."""
        ...

    def logits(self, batch: ForwardBatch) -> torch.Tensor:
        """Run one step; rank 0's float32 logits of the batch's logits rows (tests, scoring)."""
        ...

    def describe(self) -> list[RankInfo]: ...

    @property
    def failure(self) -> str | None:
        """Why the executor cannot step any more (None while healthy)."""
        ...

    def shutdown(self) -> None: ...


class InProcessExecutor:
    def __init__(self, config: EngineConfig, kv_dtype: torch.dtype, eos_ids: tuple[int, ...]):
        self.runner = ModelRunner(config, RankShard(0, 1), kv_dtype, eos_ids)

    def free_memory(self) -> int:
        return self.runner.free_memory()

    def allocate(self, spec: KVCacheSpec) -> None:
        self.runner.allocate(spec)

    def execute(self, batch: ForwardBatch) -> SampleResult | None:
        return self.runner.execute(batch)

    def logits(self, batch: ForwardBatch) -> torch.Tensor:
        return self.runner.logits(batch)

    def describe(self) -> list[RankInfo]:
        return [self.runner.describe()]

    @property
    def failure(self) -> str | None:
        return None

    def shutdown(self) -> None:
        pass


def build_executor(config: EngineConfig, kv_dtype: torch.dtype, eos_ids: tuple[int, ...]) -> Executor:
    """In-process at TP=1 unless `worker_processes`; worker processes otherwise."""
    if config.tensor_parallel_size == 1 and not config.worker_processes:
        return InProcessExecutor(config, kv_dtype, eos_ids)
    from llmop.engine.tp.multiproc import MultiprocExecutor

    return MultiprocExecutor(config, kv_dtype, eos_ids)
