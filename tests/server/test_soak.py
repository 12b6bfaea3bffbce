"""A short soak (bench/soak.py, ~60 s of mixed traffic with adapters) leaves `llmop serve` as it found it.

Cancelled streams, failed requests and normal ones, for the base model and for LoRA adapters, must
not leave KV blocks, adapter slots, threads, sockets or memory behind. The server serves three
adapters from its config file (one pinned) in two device slots, so the unpinned ones take turns in
the other slot (LRU evictions) and in host memory (reads back from disk); a fourth is loaded and
unloaded through the admin API throughout. The baseline is taken after a warm-up, when the thread
pool and the allocator have reached their working size; afterwards: the engine idle with every KV
block free, no adapter in use, loading or failed, the pinned one still in its slot, threads and
open fds back to the baseline within a small band (a keep-alive connection or a pool thread that
has not yet timed out), RSS grown by less than RSS_GROWTH_MIB. No assertion on speed.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SOAK = Path(__file__).parents[2] / "bench" / "soak.py"
FDS_BAND, THREADS_BAND = 4, 4
RSS_GROWTH_MIB = 48
SERVED, PINNED, CHURNED = ("attn-r8", "mlp-r16", "all-r32"), "attn-r8", "qv-r4"  # of adapter_dirs
MAX_LORAS = 2  # device slots: fewer than the adapters


@pytest.fixture
def engine_config(adapter_dirs, tmp_path) -> Path:
    path = tmp_path / "engine.yaml"
    path.write_text(json.dumps({  # JSON is YAML
        "max_loras": MAX_LORAS, "max_cpu_loras": MAX_LORAS, "max_lora_rank": 32,
        "adapters": [{"name": n, "source": str(adapter_dirs[n]), "pinned": n == PINNED} for n in SERVED]}))
    return path


def by_status(r: dict, prefix: str) -> dict[str, int]:
    """Statuses (and their counts) of the requests whose kind starts with `prefix`."""
    out: dict[str, int] = {}
    for key, n in r["by_kind_status"].items():
        kind, status = key.split()
        if kind.startswith(prefix):
            out[status] = out.get(status, 0) + n
    return out


def test_soak_leaves_nothing_behind(engine_config, adapter_dirs, tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(SOAK), "--seconds", "60", "--clients", "4", "--warmup-s", "15",
                          "--json", str(out), "--log", str(tmp_path / "serve.log"),
                          "--churn", f"{CHURNED}={adapter_dirs[CHURNED]}", "--", "--config", str(engine_config)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:] + (tmp_path / "serve.log").read_text()[-3000:]
    r = json.loads(out.read_text())
    before, after, delta = r["before"], r["after"], r["delta"]
    print(json.dumps(r, indent=1))
    kinds = {k.split()[0] for k in r["by_kind_status"]}
    assert {"stream", "cancel", "plain", "json", "bad"} <= kinds and r["requests"] > 50, r["by_kind_status"]
    assert r["server_errors"] == 0 and not any(k.startswith("error") for k in r["by_kind_status"]), r
    assert r["idle_after"] and after["llmop_kv_cache_free_blocks"] == after["llmop_kv_cache_total_blocks"], r
    assert after["llmop_num_requests_running"] == after["llmop_num_requests_waiting"] == 0
    assert abs(delta["fds"]) <= FDS_BAND, (before, after)
    assert abs(delta["threads"]) <= THREADS_BAND, (before, after)
    assert delta["rss_mib"] < RSS_GROWTH_MIB, (before, after)

    # Adapter requests: every one answered, every adapter used, each counted by the server.
    assert set(r["by_adapter"]) == {*SERVED, CHURNED}, r["by_adapter"]
    served = by_status(r, "adapter:")
    assert list(served) == ["200"] and list(by_status(r, "churn:")) == ["200"], r["by_kind_status"]
    assert delta["llmop_lora_requests_total"] == served["200"], (served, before, after)
    loads, unloads = r["by_kind_status"].get("admin_load 201", 0), r["by_kind_status"].get("admin_unload 204", 0)
    assert loads >= 3 and unloads == loads and list(by_status(r, "admin_")) == ["201", "204"], r["by_kind_status"]
    assert delta["llmop_lora_slot_evictions_total"] > 0 and delta["llmop_lora_disk_loads_total"] > 0, delta

    # Adapter slots back to idle: none in use, loading or failed; the same adapters registered (the
    # churned one unloaded); the pinned one still in its slot.
    for snap in (before, after):
        assert snap["lora_running_adapters"] == snap["lora_waiting_adapters"] == 0, snap
        assert snap['llmop_lora_adapters{loading}'] == snap['llmop_lora_adapters{failed}'] == 0, snap
        states = sum(v for k, v in snap.items() if k.startswith("llmop_lora_adapters{"))
        assert states == len(SERVED) and snap["llmop_lora_adapters{resident}"] <= MAX_LORAS, snap
        assert snap["lora_pinned"] == snap["lora_pinned_resident"] == 1, snap
