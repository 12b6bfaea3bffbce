"""Streaming detokenization: never half a character, equal to the full decode, stops honoured."""

from llmop.engine.detokenizer import IncrementalDetokenizer
from llmop.engine.sampling_params import SamplingParams

TEXTS = [
    "سلام دنیا! این یک آزمایش است. 🌍🚀",
    "Emoji: 👩‍👩‍👧‍👦 family, 🇫🇷 flag, and ✨ sparkles ✨.",
    "日本語のテキストと中文混合。 Mixed with English.",
]


def _stream(tokenizer, ids, prompt=(), stop=()):
    d = IncrementalDetokenizer(tokenizer, list(prompt), tuple(stop))
    pieces = [d.add(t) for t in ids]
    if d.stopped_by is None:
        pieces.append(d.flush())
    return pieces, d


def test_streamed_text_equals_full_decode(engine_llm):
    tok = engine_llm.tokenizer
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        pieces, _ = _stream(tok, ids, prompt=tok.encode("Say:"))
        assert "".join(pieces) == tok.decode(ids) == text
        assert all("\ufffd" not in p for p in pieces)
        assert len(ids) > len([p for p in pieces if p])  # some tokens were half a character


def test_stop_string_across_token_boundaries(engine_llm):
    tok = engine_llm.tokenizer
    text = "The capital of France is Paris, and the capital of Italy is Rome."
    ids = tok.encode(text, add_special_tokens=False)
    stop = "is Par"  # spans " is" | " Paris"
    pieces, d = _stream(tok, ids, stop=[stop, "never"])
    assert d.stopped_by == stop
    assert "".join(pieces) == "The capital of France "
    assert not any(stop in "".join(pieces[: i + 1]) for i in range(len(pieces)))


def test_engine_stops_on_a_string_it_generates(engine_llm):
    tok = engine_llm.tokenizer
    ids = tok.encode("Count: one, two, three,")
    free = engine_llm.generate([ids], SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True))[0]
    # Pick a stop string that straddles the 3rd and 4th generated tokens.
    before = tok.decode(free.token_ids[:3])
    boundary = tok.decode(free.token_ids[:4])
    stop = before[-2:] + boundary[len(before):][:2]
    assert len(stop) >= 3, stop
    out = engine_llm.generate([ids], SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True, stop=[stop]))[0]
    assert out.finish_reason == "stop"
    assert stop not in out.text
    assert free.text.startswith(out.text) and free.text[len(out.text):].startswith(stop)
