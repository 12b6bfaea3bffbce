"""Autoscaling on queue wait time: spec/status models, the pure decision, metric collection, the timer.

The decision (`decision.py`) is a pure function; collection (`collect.py`, `prometheus.py`) and the
kopf timer (`timer.py`) are thin shells around it, so the policy is tested by table without I/O.
"""
