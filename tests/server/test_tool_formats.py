"""The Hermes tool-call parser: whole and streamed (in every chunking) agree; malformed calls stay
text; the forced-call grammar accepts exactly the calls the parser reads."""

import json
import random

import pytest

from llmop.engine.server.tool_formats import TOOL_FORMATS, ParsedCall, StreamParser, parse_tool_calls

HERMES = TOOL_FORMATS["hermes"]
TEXTS = [
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": "{\\"x\\": 1}"}'
    '</tool_call> trailing words',
    'no calls at all, but a < and a <tool',
    '<tool_call>{not json}</tool_call> and <tool_call>{"name": "ok", "arguments": {"k": [1, 2]}}</tool_call>',
    'cut short: <tool_call>{"name": "f", "argum',
]


def _streamed(text, rng):
    parser, content, calls, i = StreamParser(HERMES), [], [], 0
    while i < len(text):
        n = rng.randint(1, 7)
        c, k = parser.feed(text[i:i + n])
        content.append(c)
        calls += k
        i += n
    content.append(parser.finish())
    return "".join(content) or None, calls


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_equals_whole_in_any_chunking(text):
    whole = parse_tool_calls(HERMES, text)
    for seed in range(20):
        assert _streamed(text, random.Random(seed)) == whole


def test_what_the_parser_reads():
    content, calls = parse_tool_calls(HERMES, TEXTS[1])
    assert calls == [ParsedCall("a", "{}"), ParsedCall("b", '{"x": 1}')] and content == "trailing words"
    content, calls = parse_tool_calls(HERMES, TEXTS[3])
    assert [c.name for c in calls] == ["ok"] and content == "<tool_call>{not json}</tool_call> and"
    assert parse_tool_calls(HERMES, TEXTS[4]) == (TEXTS[4], [])
    assert parse_tool_calls(HERMES, TEXTS[2]) == (TEXTS[2], [])


def test_the_forced_grammar_accepts_what_the_parser_reads():
    from llmop.engine.checkpoint import open_checkpoint
    from llmop.engine.grammar.compiler import GrammarCompiler
    from llmop.engine.grammar.matcher import GrammarMatcher
    from llmop.engine.grammar.spec import GrammarSpec
    from llmop.engine.tokenizer import TextTokenizer

    tok = TextTokenizer(open_checkpoint(None))
    compiler = GrammarCompiler(tok, 49152)
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}},
                                          "required": ["x"]}}, {"name": "g"}]
    calls = [ParsedCall("f", '{"x": 3}'), ParsedCall("g", "{}")]
    text = HERMES.render_calls(calls)
    m = GrammarMatcher(compiler.submit(GrammarSpec.structural_tag(HERMES.forced_grammar(tools, True))).result())
    for t in tok.encode(text, add_special_tokens=False):
        assert m.accept(t), tok.decode([t])
    assert m.accept(2) and m.is_terminated
    assert parse_tool_calls(HERMES, text) == (None, calls)
    assert json.loads(calls[0].arguments) == {"x": 3}
    compiler.shutdown()
