"""Where the admin API may load adapters from: the configured `adapter_roots`, nothing else.

A client of the admin API names a path on the engine's host. Without a limit it could make the
engine read any file the process can, and learn from the error which paths exist. So a source is
resolved the way the loader will open it (symlinks and `..` followed, relative to nothing) and
must then lie inside one resolved root; otherwise it is refused with one message that is the same
whether or not the path exists. Inside a root, the loader's own errors (which name the path) are
fine: the caller may look there anyway.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class SourceOutsideRoots(PermissionError):
    """The source is not inside an adapter root; the message never says whether it exists."""


@dataclass(frozen=True)
class AdapterRoots:
    roots: tuple[str, ...]

    @classmethod
    def of(cls, roots: list[str] | tuple[str, ...]) -> "AdapterRoots":
        return cls(tuple(os.path.realpath(r) for r in roots))

    def resolve(self, source: str) -> str:
        """The real path of `source` if it lies inside a root; SourceOutsideRoots otherwise."""
        if not self.roots:
            raise SourceOutsideRoots("this engine has no adapter_roots: the admin API loads no adapters")
        real = os.path.realpath(source) if os.path.isabs(source) else None
        if real is not None and any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.roots):
            return real
        raise SourceOutsideRoots("the adapter source must be an absolute path inside one of the engine's "
                                 f"adapter_roots ({', '.join(self.roots)})")
