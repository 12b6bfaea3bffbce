"""The compile cache, its errors, and the vocabulary xgrammar sees (special tokens are not text)."""

import json

import pytest
import torch

from llmop.engine.grammar.compiler import GrammarCompiler, GrammarError
from llmop.engine.grammar.matcher import GrammarMatcher, fill_bitmasks
from llmop.engine.grammar.spec import GrammarSpec
from llmop.engine.sampler import unpack_bitmask


@pytest.fixture(scope="module")
def compiler():
    from llmop.engine.checkpoint import open_checkpoint
    from llmop.engine.tokenizer import TextTokenizer

    c = GrammarCompiler(TextTokenizer(open_checkpoint(None)), 49152)
    yield c
    c.shutdown()


def test_equal_specs_compile_once(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    before = compiler.num_compiled
    first = compiler.submit(GrammarSpec.json_schema(schema)).result()
    again = compiler.submit(GrammarSpec.json_schema(json.loads(json.dumps(schema)))).result()
    assert first is again and compiler.num_compiled == before + 1


def test_an_uncompilable_schema_is_a_grammar_error_with_the_engines_message(compiler):
    fut = compiler.submit(GrammarSpec.json_schema({"type": "strnig"}))
    with pytest.raises(GrammarError, match='Unsupported type "strnig"'):
        fut.result()
    assert compiler.submit(GrammarSpec.json_schema({"type": "strnig"})) is fut  # failures are cached too


def _walk(compiler, spec, text):
    tok = compiler.tokenizer
    m = GrammarMatcher(compiler.submit(spec).result())
    for t in tok.encode(text, add_special_tokens=False):
        assert m.accept(t), (text, tok.id_to_token(t))
    return m


def test_special_tokens_never_count_as_text(compiler):
    """A free JSON string could otherwise contain `<|im_start|>`, which decodes to nothing."""
    m = _walk(compiler, GrammarSpec.json_schema({"type": "string"}), '"abc')
    allowed = unpack_bitmask(fill_bitmasks([m], 49152), 49152)[0]
    assert allowed[tok_id(compiler, "Ġthe")] and allowed[tok_id(compiler, "abc")]
    assert not allowed[:17].any()  # <|endoftext|>, <|im_start|>, <|im_end|>, <repo_name>, …


def tok_id(compiler, token: str) -> int:
    return compiler.tokenizer.hf.token_to_id(token)


def test_choice_and_regex_end_where_the_grammar_ends(compiler):
    m = _walk(compiler, GrammarSpec.choice(["yes", 'say "no"']), 'say "no"')
    allowed = unpack_bitmask(fill_bitmasks([m], 49152), 49152)[0]
    assert allowed.nonzero().flatten().tolist() == [2]  # only <|im_end|>, the stop token
    assert m.accept(2) and m.is_terminated
    m = _walk(compiler, GrammarSpec.regex(r"[0-9]{3}-[a-z]+"), "123-ab")
    allowed = unpack_bitmask(fill_bitmasks([m], 49152), 49152)[0]
    assert allowed[2] and allowed[tok_id(compiler, "c")] and not allowed[tok_id(compiler, "4")]
    assert torch.is_tensor(fill_bitmasks([], 49152))
