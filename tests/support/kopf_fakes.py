"""Stand-ins for what kopf hands a daemon, for tests that call the handler directly."""

from __future__ import annotations


class OneTick:
    """kopf's `stopped` flag for a daemon, set after its first wait: the daemon runs one tick."""

    def __init__(self):
        self.waits = 0

    def __bool__(self):
        return self.waits > 0

    async def wait(self, timeout):
        self.waits += 1
