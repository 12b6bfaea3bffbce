"""Engine logprobs (token ids) → the two OpenAI shapes: legacy completions and chat."""

from __future__ import annotations

from typing import Sequence

from llmop.engine.outputs import TokenLogprob
from llmop.engine.server.protocol import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob
from llmop.engine.tokenizer import TextTokenizer


def token_text(tokenizer: TextTokenizer, token_id: int) -> str:
    """A token as text on its own (special tokens kept; a partial UTF-8 byte shows as U+FFFD)."""
    return tokenizer.decode([token_id], skip_special_tokens=False)


def completion_logprobs(tokenizer: TextTokenizer, lps: Sequence[TokenLogprob], offset: int = 0) -> CompletionLogprobs:
    out = CompletionLogprobs()
    for lp in lps:
        text = token_text(tokenizer, lp.token_id)
        out.tokens.append(text)
        out.token_logprobs.append(lp.logprob)
        out.top_logprobs.append({token_text(tokenizer, t): v for t, v in lp.top})
        out.text_offset.append(offset)
        offset += len(text)
    return out


def _top(tokenizer: TextTokenizer, token_id: int, logprob: float) -> TopLogprob:
    text = token_text(tokenizer, token_id)
    return TopLogprob(token=text, logprob=logprob, bytes=list(text.encode("utf-8")))


def chat_logprobs(tokenizer: TextTokenizer, lps: Sequence[TokenLogprob]) -> ChatLogprobs:
    content = []
    for lp in lps:
        t = _top(tokenizer, lp.token_id, lp.logprob)
        content.append(ChatTokenLogprob(token=t.token, logprob=t.logprob, bytes=t.bytes,
                                        top_logprobs=[_top(tokenizer, i, v) for i, v in lp.top]))
    return ChatLogprobs(content=content)
