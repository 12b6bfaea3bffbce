"""Pure builders: an LLMDeployment spec in, the Kubernetes objects it wants out."""
