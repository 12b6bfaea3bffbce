"""Prometheus metrics of multi-LoRA serving, read at scrape time from the engine's LoRA snapshot.

`llmop_lora_requests_info` carries vLLM's labels (`max_lora`, `running_lora_adapters`,
`waiting_lora_adapters`: comma-separated names), which LoRA-affinity routers already parse; its
value is the snapshot's scrape time, as in vLLM. Per-adapter counters exist only for registered
adapters, so their label set stays bounded by what an operator loaded.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmop.engine.lora.manager import LoraStats


MOVES = (("slot_loads", "LoRA adapters written into a device slot"),
         ("slot_evictions", "LoRA adapters evicted from a device slot (least recently used) for another"),
         ("disk_loads", "LoRA adapters read back from disk after leaving host memory"))


class LoraCollector(Collector):
    def __init__(self, model: str, snapshot: Callable[[], LoraStats]):
        self.model = model
        self.snapshot = snapshot

    def collect(self) -> Iterable:
        s = self.snapshot()
        info = GaugeMetricFamily("llmop_lora_requests_info", "Running and waiting LoRA adapters",
                                 labels=["model", "max_lora", "running_lora_adapters", "waiting_lora_adapters"])
        info.add_metric([self.model, str(s.max_lora), ",".join(s.running_lora_adapters),
                         ",".join(s.waiting_lora_adapters)], time.time())
        yield info
        fams = [CounterMetricFamily(f"llmop_lora_{name}", doc, labels=["model", "adapter"]) for name, doc in (
            ("requests", "Requests received per LoRA adapter"),
            ("prompt_tokens", "Prompt tokens computed per LoRA adapter"),
            ("generation_tokens", "Tokens generated per LoRA adapter"))]
        for adapter, *values in s.counters:
            for fam, v in zip(fams, values):
                fam.add_metric([self.model, adapter], v)
        yield from fams
        states = GaugeMetricFamily("llmop_lora_adapters", "Registered LoRA adapters by state",
                                   labels=["model", "state"])
        for state in ("loading", "cpu", "resident", "disk", "failed"):
            states.add_metric([self.model, state], sum(1 for _, st in s.states if st == state))
        yield states
        for (name, doc), value in zip(MOVES, s.moves):
            fam = CounterMetricFamily(f"llmop_lora_{name}", doc, labels=["model"])
            fam.add_metric([self.model], value)
            yield fam
