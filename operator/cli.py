"""Run the llmop operator: reconcile LLMDeployments into engine ConfigMaps, Deployments, Services, PDBs.

Watches all namespaces by default, or the ones given with --namespace (the chart's namespaced mode).
Credentials: in-cluster when running in a pod, else --kubeconfig / KUBECONFIG.
"""

from __future__ import annotations

import argparse
import os


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    parser.add_argument("-n", "--namespace", action="append", default=[], help="watch only this namespace")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="kopf liveness endpoint")
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        # kopf's login reads KUBECONFIG through the kubernetes library, which reads it at import.
        os.environ["KUBECONFIG"] = os.path.abspath(args.kubeconfig)
    import kopf

    from llmop.operator import handlers
    from llmop.operator.controllers import Operator

    # kopf's formatter names the object ([namespace/name]) in every per-object line.
    kopf.configure(verbose=args.verbose, log_format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                   log_prefix=True)  # fmt: skip
    operator = Operator.create(args.kubeconfig, namespaced=bool(args.namespace))
    kopf.run(
        memo=handlers.kopf_memo(operator),
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness or None,
    )
    return 0
