"""Run the llmop operator: reconcile LLMDeployments into engine ConfigMaps, Deployments, Services, PDBs.

Watches all namespaces by default, or the ones given with --namespace (the chart's namespaced mode).
Credentials: in-cluster when running in a pod, else --kubeconfig / KUBECONFIG. With --leader-elect
several replicas run and one of them, the holder of a Lease, reconciles (`kube.lease`).
"""

from __future__ import annotations

import argparse
import logging
import os

log = logging.getLogger("llmop.operator")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    parser.add_argument("-n", "--namespace", action="append", default=[], help="watch only this namespace")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="kopf liveness endpoint")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    parser.add_argument("--leader-elect", action="store_true",
                        help="reconcile only while holding a Lease, so several replicas can run (one leads)")
    parser.add_argument("--leader-election-namespace",
                        help="the Lease's namespace (default: the operator's, $POD_NAMESPACE or llmop-system)")
    parser.add_argument("--leader-election-id", default="llmop-operator", help="the Lease's name")
    parser.add_argument("--lease-duration", type=float, default=15.0,
                        help="seconds an unrenewed Lease lasts before a standby takes over")


def _exit_on_lost(reason: str) -> None:
    # Leading no longer, this process must not write another object: the new leader reconciles.
    log.critical("leader election lost (%s): exiting", reason)
    logging.shutdown()
    os._exit(1)


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        # kopf's login reads KUBECONFIG through the kubernetes library, which reads it at import.
        os.environ["KUBECONFIG"] = os.path.abspath(args.kubeconfig)
    import kopf

    from llmop.operator import handlers
    from llmop.operator.build.settings import Settings
    from llmop.operator.controllers import Operator
    from llmop.operator.kube.client import Kube
    from llmop.operator.kube.lease import LeaderElector, LeaseTiming, default_identity
    from llmop.operator.standby import StandbyHealth

    # kopf's formatter names the object ([namespace/name]) in every per-object line.
    kopf.configure(verbose=args.verbose, log_format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                   log_prefix=True)  # fmt: skip
    settings = Settings.from_env()
    operator = Operator.create(args.kubeconfig, settings, namespaces=tuple(args.namespace))
    elector = None
    if args.leader_elect:
        namespace = args.leader_election_namespace or settings.operator_namespace
        elector = LeaderElector(Kube(operator.kube.api, "llmop-leader-election"), namespace,
                                args.leader_election_id, default_identity(), LeaseTiming(args.lease_duration))
        with StandbyHealth(args.liveness):
            elector.acquire()
        elector.keep(on_lost=_exit_on_lost)
    try:
        kopf.run(
            memo=handlers.kopf_memo(operator),
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness or None,
        )
    finally:
        if elector is not None:
            elector.release()
    return 0
