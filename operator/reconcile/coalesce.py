"""At most one run per key at a time, and a burst of triggers folded into one more run.

Level-based passes (a reconcile, an adapter placement) read everything afresh, so a trigger that
arrives while a pass for the same key runs needs no pass of its own: it only needs one more pass
after the running one, which sees its change. Ten triggers during a pass make one more, not ten.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class Coalescer:
    """Runs `fn` for a key in the calling thread unless a run for that key is under way; then the
    call returns None at once and the running caller runs `fn` once more before it returns."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._running: set[Hashable] = set()
        self._pending: set[Hashable] = set()

    def run(self, key: Hashable, fn: Callable[[], T]) -> T | None:
        with self._guard:
            if key in self._running:
                self._pending.add(key)
                return None
            self._running.add(key)
        while True:
            try:
                result = fn()
            except BaseException:
                with self._guard:
                    self._running.discard(key)
                    self._pending.discard(key)
                raise
            with self._guard:  # check and release atomically: no trigger is lost in between
                if key not in self._pending:
                    self._running.discard(key)
                    return result
                self._pending.discard(key)
