"""A thin, counted layer over the Kubernetes API: server-side apply, status patches, Events."""
