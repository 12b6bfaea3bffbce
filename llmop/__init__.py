"""llmop: a Kubernetes operator for LLM deployments, with its own inference engine.

The distribution maps the repository's top-level folders into this namespace:
`engine/` is `llmop.engine`, `kernels/` is `llmop.kernels`, `operator/` is `llmop.operator`.
"""

__version__ = "0.1.0"
