"""PEFT adapters made from the HF checkpoint of the embedded model (`hf_checkpoint_dir`), shared by the
LoRA tests (PEFT parity, eviction, the admin API) and the soak (`adapter_dirs` in tests/conftest.py).

Adapters have random non-zero A and B (PEFT would start B at zero, which changes nothing), and
differ in rank, alpha, rsLoRA and target modules, so a slot mix-up changes tokens.
"""

ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]
# name -> (rank, alpha, target modules, use_rslora, seed)
ADAPTERS = {
    "attn-r8": (8, 16, ATTN, False, 1),
    "mlp-r16": (16, 16, MLP, False, 2),
    "all-r32": (32, 32, ATTN + MLP, True, 3),
    "qv-r4": (4, 8, ["q_proj", "v_proj"], False, 4),
}
STD = 0.05  # of every A and B entry: enough to change greedy tokens, not enough to make noise


def make_adapter(base_dir, out_dir, rank, alpha, targets, rslora, seed, std=STD):
    """Write a PEFT adapter directory for the model at base_dir; returns out_dir."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), use_rslora=rslora,
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    peft_model.save_pretrained(str(out_dir))
    return out_dir


def make_adapters(base_dir, root) -> dict:
    """Every adapter of ADAPTERS under `root` (one directory each, named after it): name -> path."""
    return {name: make_adapter(base_dir, root / name, *spec) for name, spec in ADAPTERS.items()}
