"""The one timestamp format the operator writes: RFC 3339 in UTC, whole seconds (metav1.Time).

Conditions, Events and the autoscaler's decisions all use it, so a reader compares like with like.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone


def rfc3339(unix: float | None = None) -> str:
    """`unix` (default: now) as e.g. 2026-12-04T17:52:03Z."""
    return datetime.fromtimestamp(time.time() if unix is None else unix, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
