"""The operator object: one Kubernetes API client and the sub-controllers that share it.

Made once at start-up (`llmop operator`) and handed to kopf as the global memo, so every handler
finds it as `memo.operator` instead of in module globals: the reconciler, the autoscaler and
adapter placement (`adapters.placer`) share one API client, each writing as its own field manager.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmop.operator.adapters.placer import AdapterPlacer
from llmop.operator.autoscaling.timer import Autoscaler
from llmop.operator.build.settings import Settings
from llmop.operator.kube.client import Kube, make_api_client
from llmop.operator.reconcile.reconciler import Reconciler


@dataclass(frozen=True)
class Operator:
    """`kube`: the operator's own API access (the reconciler's writes and every Event);
    `namespaces`: the namespaces it watches, with no cluster-scoped access (empty: all of them)."""

    kube: Kube
    reconciler: Reconciler
    autoscaler: Autoscaler
    placer: AdapterPlacer
    namespaces: tuple[str, ...] = ()

    @property
    def namespaced(self) -> bool:
        return bool(self.namespaces)

    @classmethod
    def create(cls, kubeconfig: str | None = None, settings: Settings | None = None,
               namespaces: tuple[str, ...] = ()) -> "Operator":
        """Credentials from the cluster or the kubeconfig; settings from the environment."""
        settings = settings or Settings.from_env()
        kube = Kube(make_api_client(kubeconfig), settings.field_manager)
        return cls(kube, Reconciler(kube, settings), Autoscaler.beside(kube),
                   AdapterPlacer.beside(kube, namespaces), namespaces)
