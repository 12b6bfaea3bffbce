"""Tool calling for chat: what `tools`, `tool_choice` and `parallel_tool_calls` mean for one request.

`tool_plan` validates them (pure); `template_inputs` turns the history (assistant turns with
`tool_calls`, `tool` results) and the tool definitions into what the chat template renders: a
template that takes a `tools` variable gets them as HF templates expect; one without gets them as a
system message in the tool format's words, past calls as the format's text and results wrapped as
the format wraps them (docs/server.md, "Tool calling"). "required" and a named function are
enforced by a grammar of the format's calls; "auto" lets the model choose and the format's parser
finds the calls in its text.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from llmop.engine.grammar.spec import GrammarSpec
from llmop.engine.server.errors import APIError
from llmop.engine.server.protocol import ChatCompletionRequest, ChatMessage
from llmop.engine.server.structured import OutputGrammar
from llmop.engine.server.tool_formats import DEFAULT_TOOL_FORMAT, TOOL_FORMATS, ParsedCall, ToolFormat


class ToolChoice(enum.Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True)
class ToolPlan:
    tools: tuple[dict[str, Any], ...]  # the function definitions, as given
    choice: ToolChoice
    named: str | None
    parallel: bool
    fmt: ToolFormat

    @property
    def offered(self) -> bool:
        """The model is told about the tools and its output is searched for calls."""
        return bool(self.tools) and self.choice is not ToolChoice.NONE

    def grammar(self) -> OutputGrammar | None:
        """The grammar that forces calls ("required": one or more of any tool; named: that one)."""
        if self.choice is ToolChoice.REQUIRED:
            tag = self.fmt.forced_grammar([t["function"] for t in self.tools], self.parallel)
        elif self.choice is ToolChoice.NAMED:
            tag = self.fmt.forced_grammar([t["function"] for t in self.tools if t["function"]["name"] == self.named],
                                          False)
        else:
            return None
        return OutputGrammar(GrammarSpec.structural_tag(tag), "tools")


NO_TOOLS = ToolPlan((), ToolChoice.NONE, None, True, TOOL_FORMATS[DEFAULT_TOOL_FORMAT])


def _bad(message: str, param: str) -> APIError:
    return APIError(400, message, reason="invalid_request", param=param)


def tool_plan(req: ChatCompletionRequest) -> ToolPlan:
    tools = tuple(t.model_dump(exclude_none=True) for t in req.tools or ())
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise _bad("tool function names must be unique", "tools")
    choice, named = ToolChoice.AUTO if tools else ToolChoice.NONE, None
    tc = req.tool_choice
    if isinstance(tc, str):
        choice = ToolChoice(tc)
    elif tc is not None:
        choice, named = ToolChoice.NAMED, tc.function.name
        if named not in names:
            raise _bad(f"tool_choice names the function {named!r}, which is not in tools", "tool_choice")
    if choice in (ToolChoice.AUTO, ToolChoice.REQUIRED) and not tools:
        raise _bad(f"tool_choice {choice.value!r} needs tools", "tool_choice")
    if choice in (ToolChoice.REQUIRED, ToolChoice.NAMED) and (req.response_format is not None
                                                               or req.structured_outputs is not None):
        raise APIError(400, "a forced tool call cannot be combined with response_format or structured_outputs",
                       reason="unsupported", param="tool_choice")
    return ToolPlan(tools, choice, named, req.parallel_tool_calls, TOOL_FORMATS[DEFAULT_TOOL_FORMAT])


def _history_calls(m: ChatMessage, i: int) -> list[tuple[str, ParsedCall, dict[str, Any]]]:
    out = []
    for j, call in enumerate(m.tool_calls or ()):
        try:
            args = json.loads(call.function.arguments)
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise _bad("a tool call's arguments must be a JSON object", f"messages.{i}.tool_calls.{j}.function.arguments")
        out.append((call.id, ParsedCall(call.function.name, call.function.arguments), args))
    return out


def _message_text(m: ChatMessage, i: int) -> str:
    if isinstance(m.content, list):
        for j, part in enumerate(m.content):
            if part.type != "text" or part.text is None:
                raise APIError(400, f"content parts of type {part.type!r} are not supported (text only)",
                               reason="unsupported", param=f"messages.{i}.content.{j}.type")
    return m.text()


def template_inputs(messages: list[ChatMessage], plan: ToolPlan,
                    template_takes_tools: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, tools) for the chat template."""
    if not messages:
        raise _bad("messages must contain at least one message", "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.tool_calls and m.role != "assistant":
            raise _bad("only assistant messages carry tool_calls", f"messages.{i}.tool_calls")
        if m.role == "tool" and not m.tool_call_id:
            raise _bad("a tool message needs the tool_call_id it answers", f"messages.{i}.tool_call_id")
        text = _message_text(m, i)
        calls = _history_calls(m, i)
        msg: dict[str, Any] = {"role": m.role, "content": text}
        if template_takes_tools:
            if calls:
                msg["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": c.name, "arguments": args}}
                                     for cid, c, args in calls]
            if m.role == "tool":
                msg["tool_call_id"] = m.tool_call_id
            if m.name:
                msg["name"] = m.name
        elif calls:
            msg["content"] = (text + "\n" if text else "") + plan.fmt.render_calls([c for _, c, _ in calls])
        elif m.role == "tool":
            msg["content"] = plan.fmt.render_result(text)
        out.append(msg)
    if not plan.offered:
        return out, None
    if template_takes_tools:
        return out, list(plan.tools)
    prompt = plan.fmt.system_prompt(list(plan.tools))
    if out[0]["role"] in ("system", "developer"):
        out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + prompt}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out, None
