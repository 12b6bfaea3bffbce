"""Kubernetes resource quantities ("80Gi", "500M", "2") as bytes, for sizing.

The operator compares memory amounts in bytes; users write them as Kubernetes quantities.
Only the forms that make sense for memory are accepted (binary and decimal suffixes, plain numbers).
"""

from __future__ import annotations

import re

_SUFFIX = {
    "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}  # fmt: skip

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$"
_RE = re.compile(QUANTITY_PATTERN)


def parse_bytes(quantity: str | int) -> int:
    """'80Gi' -> 85899345920. Raises ValueError on anything that is not a memory quantity."""
    if isinstance(quantity, int):
        return quantity
    match = _RE.match(quantity.strip())
    if not match:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    number = quantity.strip()[: len(quantity.strip()) - len(match.group(2) or "")]
    return int(float(number) * _SUFFIX[match.group(2) or ""])


def format_bytes(n: float) -> str:
    """Bytes in binary units with two decimals, e.g. 1342177280 -> '1.25 GiB'."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
