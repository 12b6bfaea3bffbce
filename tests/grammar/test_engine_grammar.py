"""Grammars inside the engine, on the real model: outputs match, the request ends when the grammar
does, sampled rows and greedy rows alike, through preemption, and a bad grammar fails only its
own request."""

import json

import jsonschema
import pytest

from llmop.engine.grammar.spec import GrammarSpec
from llmop.engine.llm import LLM
from llmop.engine.sampling_params import SamplingParams

BLOCK_BYTES_FP32 = 2 * 30 * 3 * 64 * 4 * 16
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "hobbies": {"type": "array", "items": {"type": "string", "enum": ["chess", "golf", "reading"]}, "maxItems": 3},
}, "required": ["name", "age", "hobbies"], "additionalProperties": False}
PROMPTS = ["Describe a person as JSON:", "A JSON record of an old sailor:", "Here is a person:"]


def _json_params(**kw):
    return SamplingParams(max_tokens=120, grammar=GrammarSpec.json_schema(PERSON), **kw)


def test_greedy_and_sampled_outputs_validate_and_stop_with_the_grammar(engine_llm):
    params = [_json_params(temperature=0.0)] * 3 + [_json_params(temperature=1.0, seed=s) for s in range(3)]
    outs = engine_llm.generate(PROMPTS + PROMPTS, params)
    for o in outs:
        jsonschema.validate(json.loads(o.text), PERSON)
        assert o.finish_reason == "stop" and o.token_ids[-1] == 2  # ended by the grammar's stop token
    free = engine_llm.generate(PROMPTS[0], SamplingParams(max_tokens=20, temperature=0.0))[0]
    assert not free.text.startswith("{")  # the grammar, not the prompt, made the JSON


def test_choice_and_regex_on_the_offline_engine(engine_llm):
    outs = engine_llm.generate(["Is the sky blue?"] * 2, [
        SamplingParams(max_tokens=10, temperature=0.0, grammar=GrammarSpec.choice(["yes", "no", "maybe"])),
        SamplingParams(max_tokens=20, temperature=0.0, grammar=GrammarSpec.regex(r"[A-Z][a-z]{2,6}-[0-9]{2}")),
    ])
    assert outs[0].text in ("yes", "no", "maybe")
    import re
    assert re.fullmatch(r"[A-Z][a-z]{2,6}-[0-9]{2}", outs[1].text), outs[1].text


def test_grammar_rows_survive_preemption(engine_llm):
    """A preempted request keeps its matcher (its sampled tokens are kept; only KV is recomputed)."""
    small = LLM(None, dtype="float32", kv_cache_memory_bytes=10 * BLOCK_BYTES_FP32, max_num_seqs=6)
    prompts = [engine_llm.tokenizer.encode(p + " " * i) for i, p in enumerate(PROMPTS * 2)]
    params = [_json_params(temperature=0.0)] * len(prompts)
    got = small.generate(prompts, params)
    assert small.engine.scheduler.num_preemptions > 0
    ample = engine_llm.generate(prompts, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in ample]
    for o in got:
        jsonschema.validate(json.loads(o.text), PERSON)


def test_a_grammar_that_fails_to_compile_fails_only_its_request(engine_llm):
    eng = engine_llm.engine
    bad = SamplingParams(max_tokens=5, grammar=GrammarSpec.regex("a(b"))
    eng.grammars.submit(bad.grammar).exception()  # compiled (and failed) already:
    with pytest.raises(ValueError, match="parenthesis"):  # add_request refuses at once
        eng.add_request("bad-now", [1, 2, 3], bad)
    assert not eng.has_unfinished()


def test_logit_bias_is_clamped_and_applied(engine_llm):
    tok = engine_llm.tokenizer.hf.token_to_id("Ġbanana")
    out = engine_llm.generate("Fruit:", SamplingParams(max_tokens=4, temperature=0.0, logit_bias=((tok, 1e6),)))[0]
    assert out.token_ids == (tok,) * 4
    assert SamplingParams(logit_bias=((tok, -1e6),)).logit_bias == ((tok, -100.0),)


@pytest.mark.parametrize("params", [
    SamplingParams(stop_token_ids=(49152,)), SamplingParams(stop_token_ids=(-1,)),
    SamplingParams(logit_bias=((10**9, 1.0),)), SamplingParams(logit_bias=((-3, 1.0),)),
])
def test_out_of_vocabulary_ids_are_refused_by_the_engine(engine_llm, params):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine_llm.engine.add_request("oov", [1, 2], params)
    with pytest.raises(ValueError, match="prompt token id"):
        engine_llm.engine.add_request("oov-prompt", [1, 49152], SamplingParams())
    assert not engine_llm.engine.has_unfinished()
