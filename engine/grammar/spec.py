"""What output a request must produce, as plain data: the kind of grammar and its source text.

Specs are built by the server (response_format, structured_outputs, tool_choice) or by offline
callers, compared and hashed by value, and compiled once per distinct `key`. Building one checks
only its shape; whether the grammar engine can compile it is the compiler's answer.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence


class GrammarKind(enum.Enum):
    JSON_OBJECT = "json_object"  # any JSON object (response_format json_object)
    JSON_SCHEMA = "json_schema"  # a JSON schema (source: the schema as JSON text)
    REGEX = "regex"  # the whole output matches the regular expression
    CHOICE = "choice"  # the output is exactly one of the strings (source: a JSON list)
    STRUCTURAL_TAG = "structural_tag"  # tagged segments such as tool calls (source: xgrammar's structural tag JSON)


@dataclass(frozen=True)
class GrammarSpec:
    kind: GrammarKind
    source: str = ""

    @property
    def key(self) -> str:
        """The compile cache's key: equal specs share one compiled grammar."""
        return hashlib.sha256(f"{self.kind.value}\0{self.source}".encode()).hexdigest()

    @staticmethod
    def json_object() -> "GrammarSpec":
        return GrammarSpec(GrammarKind.JSON_OBJECT)

    @staticmethod
    def json_schema(schema: dict[str, Any] | bool) -> "GrammarSpec":
        # Property order is meaningful (it is the order of generation): no sort_keys.
        return GrammarSpec(GrammarKind.JSON_SCHEMA, json.dumps(schema, separators=(",", ":"), ensure_ascii=False))

    @staticmethod
    def regex(pattern: str) -> "GrammarSpec":
        return GrammarSpec(GrammarKind.REGEX, pattern)

    @staticmethod
    def choice(options: Sequence[str]) -> "GrammarSpec":
        if not options:
            raise ValueError("choice needs at least one option")
        return GrammarSpec(GrammarKind.CHOICE, json.dumps(list(options), ensure_ascii=False))

    @staticmethod
    def structural_tag(tag: dict[str, Any]) -> "GrammarSpec":
        return GrammarSpec(GrammarKind.STRUCTURAL_TAG, json.dumps(tag, separators=(",", ":"), ensure_ascii=False))
