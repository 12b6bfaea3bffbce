"""Tensor parallelism: the sharding pass (`shard`), the worker process (`worker`), and the executor
that drives one worker per rank (`multiproc`)."""
