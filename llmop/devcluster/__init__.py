"""A real Kubernetes control plane on this machine, built from Go modules, for tests and the demo."""
