"""The llmop Kubernetes operator (kopf). Never imports torch."""
