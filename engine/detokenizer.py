"""Token ids → text as they stream, never half a UTF-8 character, with stop strings honoured.

`tokenizers.decoders.DecodeStream` yields text only once a token sequence decodes to whole
characters; stop strings may span token boundaries, so the last (longest stop − 1) characters are
held back until they cannot start a stop string.
"""

from __future__ import annotations

from tokenizers.decoders import DecodeStream

from llmop.engine.tokenizer import TextTokenizer


class IncrementalDetokenizer:
    def __init__(self, tokenizer: TextTokenizer, prompt_ids: list[int], stop: tuple[str, ...],
                 skip_special_tokens: bool = True, include_stop: bool = False):
        self._tok = tokenizer.hf
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        # Prime the stream with the prompt's tail so the first output token decodes in context
        # (byte-level BPE spaces, multi-byte characters split across the prompt boundary).
        for t in prompt_ids[-4:]:
            self._stream.step(self._tok, t)
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self._include_stop = include_stop
        self.text = ""  # all output text so far (possibly ahead of what has been emitted)
        self._emitted = 0
        self.stopped_by: str | None = None

    def add(self, token_id: int) -> str:
        """Feed one token; returns the newly safe text (maybe empty). Nothing after a stop string."""
        if self.stopped_by is not None:
            return ""
        piece = self._stream.step(self._tok, token_id)
        if piece:
            start = max(0, len(self.text) - self._hold)
            self.text += piece
            if self._stop:
                self._check_stop(start)
        if self.stopped_by is not None:
            return self.flush()
        safe = len(self.text) - self._hold if self._stop else len(self.text)
        return self._emit(safe)

    def _check_stop(self, start: int) -> None:
        hits = [(i, s) for s in self._stop if (i := self.text.find(s, start)) >= 0]
        if hits:
            i, s = min(hits)
            self.text = self.text[: i + len(s)] if self._include_stop else self.text[:i]
            self.stopped_by = s

    def _emit(self, upto: int) -> str:
        if upto <= self._emitted:
            return ""
        out = self.text[self._emitted : upto]
        self._emitted = upto
        return out

    def flush(self) -> str:
        """At the end of the request: whatever was held back."""
        return self._emit(len(self.text))
