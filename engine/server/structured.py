"""response_format and structured_outputs → the grammar a request's output must match.

`output_grammar` reads the request (pure: no engine); `compile_or_400` compiles the grammar before
the request is admitted (on the compiler's threads: the event loop and the engine thread go on), so
a schema the grammar engine cannot compile is a 400 carrying the engine's message and the field it
came from, and the engine finds the grammar already in its cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmop.engine.grammar.compiler import GrammarError
from llmop.engine.grammar.spec import GrammarSpec
from llmop.engine.server.errors import APIError
from llmop.engine.server.protocol import SamplingRequest
from llmop.engine.server.state import ServerState


@dataclass(frozen=True)
class OutputGrammar:
    spec: GrammarSpec
    param: str  # the request field it came from (named in a compile error)


def output_grammar(req: SamplingRequest) -> OutputGrammar | None:
    """The grammar `response_format` or `structured_outputs` asks for (None: free text)."""
    rf = req.response_format
    if rf is not None:
        if rf.type == "json_object":
            return OutputGrammar(GrammarSpec.json_object(), "response_format")
        if rf.type == "json_schema":
            schema = rf.json_schema.schema_
            if schema is None:  # a name without a schema: any JSON object
                return OutputGrammar(GrammarSpec.json_object(), "response_format.json_schema")
            return OutputGrammar(GrammarSpec.json_schema(schema), "response_format.json_schema.schema")
        return None  # "text"
    so = req.structured_outputs
    if so is None:
        return None
    given = {name: v for name, v in (("json", so.json_), ("regex", so.regex), ("choice", so.choice)) if v is not None}
    if len(given) != 1:
        raise APIError(400, "structured_outputs takes exactly one of json, regex and choice", reason="invalid_request",
                       param="structured_outputs")
    (name, value), = given.items()
    param = f"structured_outputs.{name}"
    if name == "json":
        return OutputGrammar(GrammarSpec.json_schema(value), param)
    if name == "regex":
        return OutputGrammar(GrammarSpec.regex(value), param)
    if not value or not all(value):
        raise APIError(400, "choice needs at least one option, none of them empty", reason="invalid_request",
                       param=param)
    return OutputGrammar(GrammarSpec.choice(value), param)


async def compile_or_400(state: ServerState, grammar: OutputGrammar) -> None:
    try:
        await state.grammars.compile(grammar.spec)
    except GrammarError as e:
        raise APIError(400, str(e), reason="invalid_grammar", param=grammar.param) from None
