"""schemathesis against the live server: the OpenAPI document it publishes is the one it keeps.

The CLI runs (a subprocess, so its report is the one a person reproducing this gets) both of its
test-generating phases, coverage (boundary values of every field) and fuzzing (random data), in both
modes: positive data (valid under the document) and negative data (invalid under it). It checks
that nothing answers 5xx, that every status, content type and JSON body is one the document
declares, and that negative data is refused. Positive data may still meet a refusal the document
cannot state (a token id past the vocabulary, an unknown tool in tool_choice, context length), so
acceptance is asserted as a share of the positive cases: before the document published its bounds
(protocol.py), almost every generated body for the generation endpoints was refused.

The server is the embedded model behind the real app, with max_model_len 48 so that every accepted
request generates a bounded number of tokens (the run stays within a few minutes on 2 cores).
Afterwards the engine must be idle: nothing running or waiting, every KV block free.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

SEED = 20  # the same cases every run; change it to explore
MAX_EXAMPLES = 12  # per operation and phase
CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance", "negative_data_rejection"]
# Least share of the positive cases each generating operation accepts (coverage and fuzzing together).
MIN_ACCEPTED = {"POST /v1/completions": 0.5, "POST /v1/chat/completions": 0.3, "POST /tokenize": 0.3,
                "POST /detokenize": 0.3}


@pytest.fixture(scope="module")
def fuzz_server(engine_server_factory):
    return engine_server_factory(max_model_len=48, kv_cache_memory_bytes=64 << 20)


def _run_schemathesis(url: str, report: Path) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("schemathesis")
    cmd = [str(cli), "run", f"{url}/openapi.json", "--phases", "coverage,fuzzing", "--mode", "all",
           "--checks", ",".join(CHECKS), "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
           "--workers", "2", "--request-timeout", "120", "--continue-on-failure", "--no-color",
           "--generation-database", "none", "--report", "json", "--report-json-path", str(report)]
    # cwd: schemathesis keeps a crash cache in ./.schemathesis; keep it out of the checkout.
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=report.parent)


def _wait_idle(server, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        s = server.fresh_stats()
        idle = s.num_running == 0 and s.num_waiting == 0 and s.num_free_blocks == s.num_total_blocks
        if idle or time.monotonic() > deadline:
            return s, idle
        time.sleep(0.1)


def test_schemathesis_finds_nothing_and_leaves_the_engine_idle(fuzz_server, tmp_path):
    run = _run_schemathesis(fuzz_server.url, tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    failures = [(f["code"], f["title"], f["operations"]) for f in report["failures"]]
    assert run.returncode == 0 and not failures and not report["errors"], \
        f"{failures}\n{report['errors']}\n{run.stdout[-6000:]}"
    assert report["test_cases"]["generated"] > 300, report["test_cases"]

    rates = {}
    for op, phases in report["valid_rates"].items():
        accepted = sum(p["accepted"] for p in phases.values())
        rejected = sum(p["rejected"] for p in phases.values())
        rates[op] = accepted / max(1, accepted + rejected)
    print(json.dumps({"test_cases": report["test_cases"], "accepted": {op: round(r, 3) for op, r in rates.items()}}))
    low = {op: round(rates.get(op, 0.0), 2) for op, floor in MIN_ACCEPTED.items() if rates.get(op, 0.0) < floor}
    assert not low, f"positive cases mostly refused (the document does not say what the server accepts): {low}"

    stats, idle = _wait_idle(fuzz_server)
    assert idle, f"the engine is not idle after the run: {stats}"
    assert fuzz_server.state.num_in_flight == 0 and fuzz_server.state.num_queued == 0
    assert httpx.get(fuzz_server.url + "/health").status_code == 200
