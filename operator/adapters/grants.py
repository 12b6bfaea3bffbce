"""Whether a base LLMDeployment grants a namespace the right to attach adapters to it.

A pure function of the base's `spec.tenancy` and the namespace's labels: the base's own namespace is
always granted, others by name or by the label selector. Revoking a grant (editing the list, or a
namespace's labels) is seen on the next placement pass, which unloads the tenant's adapters.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmop.operator.api.tenancy import LabelSelector, TenancySpec


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: every matchLabels pair and every expression holds."""
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "In" and not (present and labels[req.key] in req.values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in req.values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def granted(base_namespace: str, tenancy: TenancySpec, namespace: str, labels: Mapping[str, str] | None) -> bool:
    """Whether `namespace` (with `labels`; None: they cannot be read, so the selector grants
    nothing) may attach adapters to a base in `base_namespace`."""
    if namespace == base_namespace or namespace in tenancy.namespaces:
        return True
    return (tenancy.namespace_selector is not None and labels is not None
            and selector_matches(tenancy.namespace_selector, labels))  # fmt: skip
