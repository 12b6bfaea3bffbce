"""Grammar compilation off the engine thread, once per distinct spec.

The grammar engine is xgrammar (docs/structured-output.md says why: per-token masks in a few
microseconds on this vocabulary, compiles in tens of milliseconds, JSON schema, regex, EBNF and
structural tags in one library). `GrammarCompiler.submit` returns a future at once; compilation runs
on the compiler's own threads and the result (or the engine's error) is cached by `GrammarSpec.key`,
so a schema used by many requests compiles once. The vocabulary the grammars see is built on first
use (a few seconds), also on those threads: an engine that never sees a grammar never pays for it.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from llmop.engine.grammar.spec import GrammarKind, GrammarSpec
from llmop.engine.tokenizer import TextTokenizer


class GrammarError(ValueError):
    """The grammar engine cannot compile this spec; the message is the engine's own."""


# xgrammar prefixes its messages with a time and a C++ source location: "[18:11:51] /project/cpp/x.cc:94: ".
_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")


def _vocab_type(tokenizer_json: str):
    """How the vocabulary spells bytes: GPT-2 byte-level ("Ġ"), SentencePiece byte fallback
    ("<0x0A>", "▁"), or raw text. Read from the tokenizer's decoder."""
    import xgrammar as xgr

    decoder = json.loads(tokenizer_json).get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", ())}
    if "ByteLevel" in kinds:
        return xgr.VocabType.BYTE_LEVEL, False
    if "ByteFallback" in kinds:
        return xgr.VocabType.BYTE_FALLBACK, "Metaspace" in kinds or "Strip" in kinds
    return xgr.VocabType.RAW, False


def tokenizer_info(tokenizer: TextTokenizer, vocab_size: int):
    """xgrammar's view of the vocabulary. Special tokens (`<|im_start|>`, …) are blanked, which is
    how xgrammar knows they are not text: otherwise it reads `<|im_start|>` as those 12 characters
    and would let a JSON string contain it, while the detokenizer drops it from the output."""
    import xgrammar as xgr

    special = {i for i, t in tokenizer.hf.get_added_tokens_decoder().items() if t.special}
    vocab = ["" if i in special else (tokenizer.hf.id_to_token(i) or "") for i in range(tokenizer.vocab_size)]
    vocab_type, prefix_space = _vocab_type(tokenizer.hf.to_str())
    return xgr.TokenizerInfo(vocab, vocab_type, vocab_size=vocab_size, stop_token_ids=list(tokenizer.eos_token_ids),
                             add_prefix_space=prefix_space)


def _ebnf_choice(options: list[str]) -> str:
    # A JSON string literal is also a valid xgrammar EBNF string literal: both escape quotes,
    # backslashes, newlines and code points (a backslash-u and four hex digits) the same way.
    return "root ::= " + " | ".join(json.dumps(o, ensure_ascii=False) for o in options)


def _compile(compiler, spec: GrammarSpec):
    if spec.kind is GrammarKind.JSON_OBJECT:
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
    if spec.kind is GrammarKind.JSON_SCHEMA:
        # Compact JSON (", " and ": ", no free whitespace): a small model cannot wander into
        # endless whitespace, and properties the schema does not name are never generated.
        return compiler.compile_json_schema(spec.source, any_whitespace=False, strict_mode=True)
    if spec.kind is GrammarKind.REGEX:
        return compiler.compile_regex(spec.source)
    if spec.kind is GrammarKind.CHOICE:
        return compiler.compile_grammar(_ebnf_choice(json.loads(spec.source)))
    if spec.kind is GrammarKind.STRUCTURAL_TAG:
        return compiler.compile_structural_tag(spec.source)
    raise GrammarError(f"unknown grammar kind {spec.kind}")


class GrammarCompiler:
    def __init__(self, tokenizer: TextTokenizer, vocab_size: int, max_workers: int = 2, cache_size: int = 512):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.cache_size = cache_size
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="llmop-grammar")
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[str, Future] = collections.OrderedDict()
        self._backend: Future | None = None
        self.num_compiled = 0  # compilations run (not cache hits): for tests and metrics

    def _compiler(self):
        """xgrammar's compiler over this vocabulary, built once on a compiler thread."""
        with self._lock:
            if self._backend is None:
                self._backend = self._executor.submit(self._build_backend)
            backend = self._backend
        return backend

    def _build_backend(self):
        import xgrammar as xgr

        # Our cache holds the compiled grammars; xgrammar's own would keep a second copy.
        return xgr.GrammarCompiler(tokenizer_info(self.tokenizer, self.vocab_size), max_threads=1,
                                   cache_enabled=False)

    def warm(self) -> Future:
        """Start building the vocabulary now (a server calls this at start-up)."""
        return self._compiler()

    def _run(self, spec: GrammarSpec):
        compiler = self._compiler().result()
        self.num_compiled += 1
        try:
            return _compile(compiler, spec)
        except GrammarError:
            raise
        except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError, ValueError, its own types
            raise GrammarError(f"the grammar could not be compiled: {_LOG_PREFIX.sub('', str(e).strip())}") from None

    def submit(self, spec: GrammarSpec) -> Future:
        """A future of the compiled grammar (done at once on a cache hit); its exception is a
        GrammarError when the spec cannot be compiled (failures are cached too)."""
        key = spec.key
        with self._lock:
            fut = self._cache.get(key)
            if fut is not None:
                self._cache.move_to_end(key)
                return fut
            fut = self._executor.submit(self._run, spec)
            self._cache[key] = fut
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return fut

    async def compile(self, spec: GrammarSpec) -> Any:
        """Await the compiled grammar from a coroutine without blocking its event loop."""
        return await asyncio.wrap_future(self.submit(spec))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
