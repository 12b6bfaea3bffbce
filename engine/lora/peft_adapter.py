"""Reading a PEFT LoRA adapter from disk and checking that it fits the base model and the slots.

Everything here runs on the host and touches no engine state, so a slow or broken adapter is
read (and rejected, with a message naming what does not fit) off the engine thread.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from llmop.engine.model_config import ModelConfig

# Module name inside a decoder layer -> (in_features, out_features) as a function of the config.
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$")


class AdapterError(ValueError):
    """The adapter cannot be served on this model; the message says why."""


def module_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each LoRA-targetable linear layer of the base model."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    h, i = cfg.hidden_size, cfg.intermediate_size
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def module_path(layer: int, module: str) -> str:
    """The module's name in the model, HF style: `model.layers.3.self_attn.q_proj`."""
    return f"model.layers.{layer}.{_PARENT[module]}.{module}"


@dataclass(frozen=True)
class LoraAdapter:
    """A validated adapter in host memory.

    `weights[(layer, module)] = (A [rank, in], B^T [rank, out])`: PEFT's lora_A and lora_B
    transposed, the layout of the device slots (`layers`), so a slot load is a row copy on the engine
    thread. B is already multiplied by the module's scaling divided by `scaling` (non-zero only where
    `alpha_pattern`/`rank_pattern` give a module its own scaling), so that one `scaling` per adapter
    serves every module.
    """

    name: str
    source: str
    rank: int  # the largest rank of any module
    scaling: float
    alpha: float  # lora_alpha of adapter_config.json
    target_modules: frozenset[str]
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = field(repr=False, compare=False)

    def mismatch(self, rank: int | None = None, alpha: float | None = None) -> str | None:
        """Why this is not the adapter its loader expected (`rank`, `alpha` when given), None if it is."""
        wrong = [f"{what} {have:g}, expected {want:g}" for what, have, want in
                 (("rank", self.rank, rank), ("lora_alpha", self.alpha, alpha)) if want is not None and have != want]
        return f"adapter {self.name!r} is not the one expected: {'; '.join(wrong)}" if wrong else None

    @property
    def num_bytes(self) -> int:
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.weights.values())


def _scaling(alpha: float, rank: int, rslora: bool) -> float:
    return alpha / math.sqrt(rank) if rslora else alpha / rank


def _pattern_value(pattern: dict, layer: int, module: str, default):
    """PEFT's rank_pattern/alpha_pattern: keys are regexes or suffixes of the module name."""
    name = module_path(layer, module)
    for key, value in pattern.items():
        if name.endswith(key) or re.search(rf"(^|\.){key}$", name):
            return value
    return default


def _read_config(path: Path) -> dict:
    cfg_path = path / "adapter_config.json"
    if not cfg_path.is_file():
        raise AdapterError(f"{path}: no adapter_config.json (not a PEFT adapter directory)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AdapterError(f"{cfg_path}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise AdapterError(f"{cfg_path}: expected a JSON object")
    if cfg.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path}: peft_type {cfg.get('peft_type')!r} is not LORA")
    for key, bad, why in (("use_dora", True, "DoRA"), ("fan_in_fan_out", True, "fan_in_fan_out (Conv1D bases)")):
        if cfg.get(key) == bad:
            raise AdapterError(f"{path}: {why} is not supported")
    if cfg.get("bias", "none") != "none":
        raise AdapterError(f"{path}: LoRA bias {cfg.get('bias')!r} is not supported (only 'none')")
    if cfg.get("modules_to_save"):
        raise AdapterError(f"{path}: modules_to_save {cfg['modules_to_save']} is not supported")
    return cfg


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    st, pt = path / "adapter_model.safetensors", path / "adapter_model.bin"
    try:
        if st.is_file():
            from safetensors.torch import load_file

            return load_file(str(st))
        if pt.is_file():
            return torch.load(str(pt), map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or corrupt file: the library's message, with the path
        raise AdapterError(f"{path}: cannot read adapter weights ({type(e).__name__}: {e})") from None
    raise AdapterError(f"{path}: no adapter_model.safetensors")


def load_peft_adapter(name: str, source: str | Path, model: ModelConfig, max_rank: int,
                      dtype: torch.dtype = torch.float32) -> LoraAdapter:
    """Read and validate a PEFT LoRA directory for `model`; raises AdapterError with the reason."""
    path = Path(source)
    if not path.is_dir():
        raise AdapterError(f"adapter {name!r}: {path} is not a directory")
    cfg = _read_config(path)
    rank, alpha = int(cfg.get("r", 8)), float(cfg.get("lora_alpha", 8))
    rslora = bool(cfg.get("use_rslora", False))
    rank_pattern, alpha_pattern = cfg.get("rank_pattern") or {}, cfg.get("alpha_pattern") or {}
    shapes = module_shapes(model)
    raw: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, t in _read_tensors(path).items():
        m = _KEY.search(key)
        if m is None:
            raise AdapterError(f"adapter {name!r}: tensor {key!r} is not a LoRA weight of a decoder "
                               f"layer's {'/'.join(TARGET_MODULES)} (embedding/lm_head adapters are not supported)")
        layer, module, which = int(m.group(1)), m.group(3), m.group(4)
        if module not in shapes:
            raise AdapterError(f"adapter {name!r}: target module {module!r} is not supported "
                               f"(supported: {', '.join(TARGET_MODULES)})")
        if layer >= model.num_layers:
            raise AdapterError(f"adapter {name!r}: has weights for layer {layer} but the base model has "
                               f"{model.num_layers} layers (trained for a different base model?)")
        raw.setdefault((layer, module), {})[which] = t
    if not raw:
        raise AdapterError(f"adapter {name!r}: no LoRA weights in {path}")

    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    base_scaling = _scaling(alpha, rank, rslora)
    for (layer, module), ab in sorted(raw.items()):
        where = f"adapter {name!r}, {module_path(layer, module)}"
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"{where}: lora_A and lora_B must both be present")
        a, b = ab["A"], ab["B"]
        fin, fout = shapes[module]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise AdapterError(f"{where}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} are not a LoRA pair")
        if a.shape[1] != fin or b.shape[0] != fout:
            raise AdapterError(
                f"{where}: the adapter maps {a.shape[1]} -> {b.shape[0]} features but the base model's layer "
                f"maps {fin} -> {fout} (trained for a different base architecture?)")
        r = a.shape[0]
        if r > max_rank:
            raise AdapterError(f"{where}: rank {r} exceeds max_lora_rank {max_rank}")
        if r != _pattern_value(rank_pattern, layer, module, rank):
            raise AdapterError(f"{where}: rank {r} disagrees with adapter_config.json")
        s = _scaling(float(_pattern_value(alpha_pattern, layer, module, alpha)), r, rslora)
        b = b.to(torch.float32) * (s / base_scaling) if s != base_scaling else b
        weights[(layer, module)] = (a.to(dtype).contiguous(), b.to(dtype).t().contiguous())
    if not all(torch.isfinite(a).all() and torch.isfinite(b).all() for a, b in weights.values()):
        raise AdapterError(f"adapter {name!r}: weights contain NaN or infinity")
    return LoraAdapter(name=name, source=str(path), rank=max(a.shape[0] for a, _ in weights.values()),
                       scaling=base_scaling, alpha=alpha, target_modules=frozenset(m for _, m in weights),
                       weights=weights)
