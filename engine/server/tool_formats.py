"""How a model writes tool calls, one class per format behind a small registry.

A format knows four things: how to tell a model without template support about the tools (a system
message) and about past calls and results (history text); the grammar that forces one or more calls
(`tool_choice` "required" or a named function); and how to find the calls in the model's text,
as it streams (`StreamParser`) or whole (`parse_tool_calls`, the same parser fed at once). Hermes-style `<tool_call>{json}</tool_call>`
(Hermes 2 Pro, Qwen 2.5, SmolLM's tool-tuned variants) is the first; another format is another
class in `TOOL_FORMATS`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object as text


class ToolFormat(Protocol):
    name: str
    BEGIN: str
    END: str

    def system_prompt(self, tools: list[dict[str, Any]]) -> str: ...

    def render_calls(self, calls: list[ParsedCall]) -> str: ...

    def render_result(self, content: str) -> str: ...

    def forced_grammar(self, tools: list[dict[str, Any]], parallel: bool) -> dict[str, Any]: ...

    def parse_call(self, block: str) -> ParsedCall | None: ...


class HermesFormat:
    name = "hermes"
    BEGIN, END = "<tool_call>", "</tool_call>"
    _CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

    def system_prompt(self, tools: list[dict[str, Any]]) -> str:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return ("You are a function calling AI model. You are provided with function signatures within "
                "<tools></tools> XML tags. You may call one or more functions to assist with the user query. "
                "Don't make assumptions about what values to plug into functions. Here are the available tools: "
                f"<tools>\n{listing}\n</tools>\nFor each function call return a json object with function name "
                "and arguments within <tool_call></tool_call> XML tags as follows:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')

    def render_calls(self, calls: list[ParsedCall]) -> str:
        return "\n".join(f'{self.BEGIN}\n{{"name": {json.dumps(c.name, ensure_ascii=False)}, "arguments": '
                         f"{c.arguments}}}\n{self.END}" for c in calls)

    def render_result(self, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"

    def forced_grammar(self, tools: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
        """xgrammar structural tag: one call (or, if parallel, calls separated by newlines), each
        `<tool_call>\\n{"name": "<a tool>", "arguments": <its parameters schema>}\\n</tool_call>`."""
        tags = [{"type": "tag",
                 "begin": f'{self.BEGIN}\n{{"name": {json.dumps(t["name"], ensure_ascii=False)}, "arguments": ',
                 "content": {"type": "json_schema", "json_schema": t.get("parameters") or {"type": "object"}},
                 "end": f"}}\n{self.END}"} for t in tools]
        return {"type": "structural_tag", "format": {"type": "tags_with_separator", "tags": tags, "separator": "\n",
                                                      "at_least_one": True, "stop_after_first": not parallel}}

    def parse_call(self, block: str) -> ParsedCall | None:
        """The call in one `<tool_call>…</tool_call>` block; None if its JSON does not parse or
        lacks a name or an object of arguments (the block then stays text)."""
        m = self._CALL.fullmatch(block)
        return _call_of(m.group(1)) if m else None


def _call_of(body: str) -> ParsedCall | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj["name"], json.dumps(args, ensure_ascii=False))


class StreamParser:
    """Tool calls out of streamed text. `feed` returns (content that is surely not part of a call,
    calls completed by this piece); text that might begin a call is held back until it is clear.
    Content is the text outside calls without the whitespace that touches a call or either end."""

    def __init__(self, fmt: ToolFormat):
        self.fmt = fmt
        self._buffer = ""
        self._pending_ws = ""  # whitespace after the last content: dropped if a call or the end follows
        self._trim_left = True  # at the start, and right after a call

    def _content(self, text: str, out: list[str]) -> None:
        if self._trim_left:
            text = text.lstrip()
        body = text.rstrip()
        if body:
            out.append(self._pending_ws + body)
            self._pending_ws = text[len(body):]
            self._trim_left = False
        elif not self._trim_left:
            self._pending_ws += text

    def feed(self, piece: str) -> tuple[str, list[ParsedCall]]:
        self._buffer += piece
        content: list[str] = []
        calls: list[ParsedCall] = []
        while True:
            start = self._buffer.find(self.fmt.BEGIN)
            if start < 0:
                keep = _partial_suffix(self._buffer, self.fmt.BEGIN)
                self._content(self._buffer[:len(self._buffer) - keep], content)
                self._buffer = self._buffer[len(self._buffer) - keep:]
                break
            end = self._buffer.find(self.fmt.END, start)
            if end < 0:
                self._content(self._buffer[:start], content)
                self._buffer = self._buffer[start:]
                break
            end += len(self.fmt.END)
            self._content(self._buffer[:start], content)
            call = self.fmt.parse_call(self._buffer[start:end])
            if call is None:
                self._content(self._buffer[start:end], content)
            else:
                calls.append(call)
                self._pending_ws, self._trim_left = "", True
            self._buffer = self._buffer[end:]
        return "".join(content), calls

    def finish(self) -> str:
        """What is still held back, as content (an unfinished call stays text)."""
        out: list[str] = []
        self._content(self._buffer, out)
        self._buffer = ""
        return "".join(out)


def parse_tool_calls(fmt: ToolFormat, text: str) -> tuple[str | None, list[ParsedCall]]:
    """A whole output → (content, or None if there is none; the calls), exactly as streaming sees it."""
    parser = StreamParser(fmt)
    content, calls = parser.feed(text)
    content += parser.finish()
    return content or None, calls


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


TOOL_FORMATS: dict[str, ToolFormat] = {"hermes": HermesFormat()}
DEFAULT_TOOL_FORMAT = "hermes"
