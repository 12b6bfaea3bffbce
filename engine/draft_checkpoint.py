"""Making a draft model from a target checkpoint: keep its first layers.

A draft must share the target's tokenizer; the cheapest one that does is the target itself cut
after its first few decoder layers (embeddings, those layers, the final norm and the head kept).
It proposes worse than a trained small model, but needs no other download: tests and
`bench/speculative.py` use it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def truncate_checkpoint(src: str | Path, num_layers: int, dst: str | Path) -> Path:
    """Write to `dst` a HF checkpoint of `src` (a HF directory, single-file safetensors) keeping
    decoder layers 0..num_layers-1; tokenizer and other files are copied as they are."""
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    config = json.loads((src / "config.json").read_text())
    if not 1 <= num_layers <= config["num_hidden_layers"]:
        raise ValueError(f"num_layers must be in 1..{config['num_hidden_layers']}")
    dst.mkdir(parents=True, exist_ok=True)
    weights = load_file(src / "model.safetensors")
    save_file({k: v for k, v in weights.items()
               if not (k.startswith("model.layers.") and int(k.split(".")[2]) >= num_layers)},
              dst / "model.safetensors")
    (dst / "config.json").write_text(json.dumps({**config, "num_hidden_layers": num_layers}, indent=2))
    for f in src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, dst / f.name)
    return dst
