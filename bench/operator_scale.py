"""Scale: N LLMDeployments applied at once on the local control plane, until all are Ready.

Reports the wall time to all-Ready, the operator's own API requests per LLMDeployment (counted by
its `Kube` client, logged at shutdown), and the API server's request total over the run (every
client: controllers, scheduler, kwok, kopf's watches) per LLMDeployment. Adds fake 8-GPU nodes so
every engine pod (1 GPU each) can be scheduled. Results: bench/results/operator_scale.json and
docs/benchmarks.md.

    python bench/operator_scale.py --count 200
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml

from llmop.devcluster import plane
from llmop.operator.local import OperatorProcess, eventually, install_chart, service_account_kubeconfig

NAMESPACE = "bench-scale"
RESULTS = Path(__file__).resolve().parent / "results"


def apiserver_requests(cluster) -> float:
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    return sum(float(m.group(1)) for m in re.finditer(r"^apiserver_request_total\{[^}]*\} (\S+)$", text, re.M))


def ready_count(cluster) -> int:
    out = cluster.kubectl("get", "llmd", "-n", NAMESPACE, "-o",
                          'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}')  # fmt: skip
    return out.stdout.split().count("True")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args()
    from llmop.devcluster.testing import session_cluster

    extra = [plane.NodeSpec(f"llmop-bench-gpu-{i}", cpu="96", memory="1Ti", gpus=8, pods=250,
                            instance_type="gpu-8x-h100-80gb")
             for i in range(max(0, math.ceil(args.count / 8) - 2 + 1))]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, session_cluster() as cluster:
        work = Path(tmp)
        for node in extra:
            cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(plane.node_manifest(node)), check=False)
        install_chart(cluster)
        cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        op = OperatorProcess(service_account_kubeconfig(cluster, work / "kubeconfig"), work / "operator.log")
        op.start()
        time.sleep(5)  # let kopf list and watch before the burst (not part of the measurement)
        items = [{"apiVersion": "llmop.dev/v1alpha1", "kind": "LLMDeployment", "metadata": {"name": f"m{i:03d}"},
                  "spec": {"engine": {"maxModelLen": 2048}}} for i in range(args.count)]  # fmt: skip
        before = apiserver_requests(cluster)
        t0 = time.monotonic()
        cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", "--server-side", input=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": items}), timeout=600)  # fmt: skip
        applied = time.monotonic() - t0
        eventually(lambda: ready_count(cluster) == args.count, timeout=args.timeout, interval=2, what="all Ready")
        elapsed = time.monotonic() - t0
        after = apiserver_requests(cluster)
        op.stop()
        m = re.search(r"llmop api requests: (\{.*\})", op.log.read_text())
        ours = json.loads(m.group(1)) if m else {}
        result = {
            "count": args.count,
            "apply_seconds": round(applied, 1),
            "all_ready_seconds": round(elapsed, 1),
            "operator_requests": ours,
            "operator_requests_per_deployment": round(sum(ours.values()) / args.count, 1) if ours else None,
            "apiserver_requests_per_deployment": round((after - before) / args.count, 1),
        }
        print(json.dumps(result, indent=2))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "operator_scale.json").write_text(json.dumps(result, indent=2))
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        for node in extra:
            cluster.kubectl("delete", "node", node.name, "--wait=false", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
