"""A short soak (bench/soak.py, ~60 s of mixed traffic) leaves `llmop serve` as it found it.

Cancelled streams, failed requests and normal ones must not leave KV blocks, threads, sockets or
memory behind. The baseline is taken after a warm-up, when the thread pool and the allocator have
reached their working size; afterwards: the engine idle with every KV block free, threads and open
fds back to the baseline within a small band (a keep-alive connection or a pool thread that has not
yet timed out), RSS grown by less than RSS_GROWTH_MIB. No assertion on speed.
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


def test_soak_leaves_nothing_behind(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(SOAK), "--seconds", "60", "--clients", "4", "--warmup-s", "15",
                          "--json", str(out), "--log", str(tmp_path / "serve.log")],
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
