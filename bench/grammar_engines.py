"""Which grammar engine: xgrammar, llguidance and outlines-core on the embedded model's vocabulary.

For each engine and each JSON schema below: the time to compile the schema (cold: a fresh compiler,
no cache; for llguidance, whose compilation is lazy, the grammar plus the matcher plus the first
mask) and the time to compute one token mask, walking a valid instance token by token (mask, then
advance on the instance's next token), as the engine step would. The instance is the schema's
example serialized with `json.dumps` defaults and tokenized with the engine's own tokenizer, so
every engine walks the same tokens. The result decided which engine llmop uses (docs/structured-output.md).

    .venv/bin/python -P bench/grammar_engines.py [--repeat 3]

Needs all three packages (`pip install xgrammar llguidance outlines-core`); only the chosen one is a
dependency of llmop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

OBJ = {"type": "object"}

# (name, schema, an instance that validates)
SCHEMAS = [
    ("flat", {**OBJ, "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False},
     {"name": "Ada Lovelace", "age": 36}),
    ("nested+arrays+enum", {**OBJ, "properties": {
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}},
        "author": {**OBJ, "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
                   "required": ["name", "email"], "additionalProperties": False},
    }, "required": ["title", "tags", "author"], "additionalProperties": False},
     {"title": "Colors", "tags": ["red", "blue"], "author": {"name": "Bo", "email": "bo@example.com"}}),
    ("bounds+pattern+optional", {**OBJ, "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "price": {"type": "number", "minimum": 0, "maximum": 1000},
        "qty": {"type": "integer", "minimum": 1, "maximum": 99},
        "note": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]},
    }, "required": ["sku", "price", "qty", "note"], "additionalProperties": False},
     {"sku": "ABC-1234", "price": 12.5, "qty": 3, "note": None}),
    ("wide (40 fields)", {**OBJ, "properties": {f"field_{i}": {"type": ["string", "integer", "boolean"][i % 3]}
                                                 for i in range(40)},
                          "required": [f"field_{i}" for i in range(40)], "additionalProperties": False},
     {f"field_{i}": ["v", i, True][i % 3] for i in range(40)}),
    ("any JSON (json_object)", {"type": "object"}, {"a": [1, 2, {"b": None}], "c": "d"}),
]


def engine_tokenizer():
    from llmop.engine.checkpoint import open_checkpoint
    from llmop.engine.tokenizer import TextTokenizer

    return TextTokenizer(open_checkpoint(None))


def byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest are shifted."""
    kept = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table = {chr(b): b for b in kept}
    n = 0
    for b in range(256):
        if b not in kept:
            table[chr(256 + n)] = b
            n += 1
    return table


class XGrammar:
    name = "xgrammar"

    def __init__(self, tok):
        import xgrammar as xgr

        self.xgr = xgr
        vocab = [tok.hf.id_to_token(i) for i in range(tok.vocab_size)]
        self.info = xgr.TokenizerInfo(vocab, xgr.VocabType.BYTE_LEVEL, vocab_size=tok.vocab_size,
                                      stop_token_ids=list(tok.eos_token_ids))

    def compile(self, schema):
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)

    def walk(self, compiled, tokens) -> list[float]:
        m = self.xgr.GrammarMatcher(compiled)
        mask = self.xgr.allocate_token_bitmask(1, self.info.vocab_size)
        times = []
        for t in tokens:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(mask)
            times.append(time.perf_counter() - t0)
            assert m.accept_token(t), t
        return times


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok):
        import llguidance
        import llguidance.torch

        self.llg = llguidance
        self.fill = llguidance.torch.fill_next_token_bitmask
        self.alloc = llguidance.torch.allocate_token_bitmask
        self.tok = llguidance.LLTokenizer(tok.hf.to_str(), n_vocab=tok.vocab_size, eos_token=list(tok.eos_token_ids))

    def compile(self, schema):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
        m = self.llg.LLMatcher(self.tok, grammar)
        assert not m.is_error(), m.get_error()
        self.fill(m, self.alloc(1, self.tok.vocab_size), 0)  # the lexer is built lazily, on first use
        return grammar

    def walk(self, grammar, tokens) -> list[float]:
        m = self.llg.LLMatcher(self.tok, grammar)
        mask = self.alloc(1, self.tok.vocab_size)
        times = []
        for t in tokens:
            t0 = time.perf_counter()
            self.fill(m, mask, 0)
            times.append(time.perf_counter() - t0)
            assert m.consume_token(t), (t, m.get_error())
        return times


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tok):
        import outlines_core

        self.oc = outlines_core
        dec = byte_level_decoder()
        eos = tok.eos_token_id
        special = {i for i in range(tok.vocab_size) if tok.hf.id_to_token(i).startswith("<|")}
        vocab: dict[bytes, list[int]] = {}
        for i in range(tok.vocab_size):
            if i == eos or i in special:
                continue
            vocab.setdefault(bytes(dec[c] for c in tok.hf.id_to_token(i)), []).append(i)
        self.vocab = outlines_core.Vocabulary(eos, vocab)
        self.vocab_size = tok.vocab_size

    def compile(self, schema):
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        return self.oc.Index(regex, self.vocab)

    def walk(self, index, tokens) -> list[float]:
        import torch

        guide = self.oc.Guide(index)
        mask = torch.zeros((self.vocab_size + 31) // 32, dtype=torch.int32)
        times = []
        for t in tokens:
            t0 = time.perf_counter()
            guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
            times.append(time.perf_counter() - t0)
            if guide.is_finished():  # outlines ends at the end of the regex: EOS is not a transition
                break
            guide.advance(t)
        return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tok = engine_tokenizer()
    rows = []
    for cls in (XGrammar, LLGuidance, OutlinesCore):
        t0 = time.perf_counter()
        eng = cls(tok)
        setup = time.perf_counter() - t0
        print(f"{cls.name}: tokenizer set-up {setup * 1e3:.0f} ms", flush=True)
        rows.append((cls.name, "(tokenizer set-up, once per engine)", setup * 1e3, None, None, None))
        for name, schema, instance in SCHEMAS:
            tokens = tok.encode(json.dumps(instance), add_special_tokens=False) + [tok.eos_token_id]
            compile_s, mask_s = [], []
            try:
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    compiled = eng.compile(schema)
                    compile_s.append(time.perf_counter() - t0)
                    mask_s += eng.walk(compiled, tokens)
            except Exception as e:  # noqa: BLE001 - an engine that cannot do a schema is a result
                print(f"  {name}: failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
                rows.append((cls.name, name, None, None, None, None))
                continue
            row = (cls.name, name, statistics.median(compile_s) * 1e3, statistics.median(mask_s) * 1e6,
                   statistics.mean(mask_s) * 1e6, max(mask_s) * 1e6)
            rows.append(row)
            print(f"  {name}: compile {row[2]:.1f} ms, mask median {row[3]:.0f} us, mean {row[4]:.0f} us, max {row[5]:.0f} us "
                  f"({len(tokens)} tokens)", flush=True)
    print("\n| engine | schema | compile (ms, median) | mask per token (µs): median | mean | max |")
    print("|---|---|---|---|---|---|")
    for e, s, *vals in rows:
        cells = ["" if v is None else f"{v:.1f}" if i == 0 else f"{v:.0f}" for i, v in enumerate(vals)]
        cells[0] = cells[0] or "failed"
        print(f"| {e} | {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
