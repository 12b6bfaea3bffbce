"""Reconciliation: the pure status logic (`conditions`, `status`) and the loop that applies it
(`reconciler`), which kopf handlers only call."""
