"""Text ↔ token ids, and chat messages → prompt, for both checkpoint formats.

HF directories carry a `tokenizer.json` that the `tokenizers` library loads as is. GGUF files carry
the vocabulary and merges in their metadata; the byte-level BPE is rebuilt from them with the
pre-tokenizer that the `tokenizer.ggml.pre` name stands for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from llmop.engine.checkpoint import Checkpoint

# Split patterns of the GGUF pre-tokenizers we know (as in the models' own tokenizer.json files).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def _gguf_pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama-bpe", "llama3", "qwen2", "deepseek-llm"):
        split = _QWEN2_SPLIT if pre == "qwen2" else _LLAMA3_SPLIT
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    return byte_level  # "gpt2" and "default": the GPT-2 regex


def _tokenizer_from_gguf(meta: dict[str, Any], bos_id: int | None) -> Tokenizer:
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = _gguf_pre_tokenizer(meta.get("tokenizer.ggml.pre"))
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type") or []
    # 3 = control, 4 = user-defined: whole tokens that BPE must never split.
    specials = [AddedToken(tokens[i], special=(t == 3), normalized=False) for i, t in enumerate(types) if t in (3, 4)]
    tok.add_special_tokens([s for s in specials if s.special])
    tok.add_tokens([s for s in specials if not s.special])
    if meta.get("tokenizer.ggml.add_bos_token") and bos_id is not None:
        bos = tokens[bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return tok


@dataclass(frozen=True)
class ChatTemplate:
    """A model's Jinja chat template, rendered the way HF's `apply_chat_template` renders it."""

    source: str
    bos_token: str
    eos_token: str

    @property
    def supports_tools(self) -> bool:
        """The template renders a `tools` variable itself (HF's convention for tool definitions)."""
        return "tools" in self.source

    def render(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
               tools: Sequence[dict[str, Any]] | None = None) -> str:
        return _compile(self.source).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            tools=list(tools) if tools else None,
        )


def _compile(source: str):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    return env.from_string(source)


class TextTokenizer:
    """The engine's tokenizer: encode, decode, special ids and the chat template."""

    def __init__(self, ckpt: Checkpoint):
        if ckpt.format == "gguf":
            self.hf = _tokenizer_from_gguf(ckpt.tokenizer_meta, ckpt.bos_token_id)
        else:
            self.hf = Tokenizer.from_file(str(ckpt.path / "tokenizer.json"))
        self.bos_token_id = ckpt.bos_token_id
        self.eos_token_ids = ckpt.eos_token_ids
        self.vocab_size = self.hf.get_vocab_size(with_added_tokens=True)
        template = ckpt.chat_template
        self.chat_template = (
            ChatTemplate(template, self._token_text(ckpt.bos_token_id), self._token_text(self.eos_token_id))
            if template
            else None
        )

    @property
    def eos_token_id(self) -> int | None:
        return self.eos_token_ids[0] if self.eos_token_ids else None

    def _token_text(self, token_id: int | None) -> str:
        return (self.hf.id_to_token(token_id) or "") if token_id is not None else ""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        return self.hf.id_to_token(token_id) or ""

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """Render the messages (and tool definitions, for a template that takes them) with the
        model's template and tokenize the result (the template writes special tokens such as BOS
        itself, so none are added)."""
        if self.chat_template is None:
            raise ValueError("this model has no chat template; use /v1/completions")
        text = self.chat_template.render(messages, add_generation_prompt, tools)
        return self.encode(text, add_special_tokens=False)
