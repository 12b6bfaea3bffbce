"""A thin, counted layer over the Kubernetes API (apply, /scale and status patches, Events) and the
identity of the objects it applies."""
