"""`spec.model`: which checkpoint to serve, where it comes from, and its shape for sizing.

The operator sizes tensor parallelism before any pod exists, so it needs the architecture without
reading weights: from `architecture` when given, else from the built-in catalog by name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmop.operator.api.base import CRDModel, cel

SOURCE_PATTERN = r"^(hf://[^/\s]+/[^/\s@]+(@[^\s]+)?|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^\s]*)?|s3://[^/\s]+(/[^\s]*)?|/[^\s]*)$"

WeightDType = Literal["float32", "bfloat16", "float16", "fp8", "int8", "int4"]
Quantization = Literal["auto", "none", "int8", "fp16"]


class ArchitectureSpec(CRDModel):
    """The numbers sizing needs, as in the model's config.json; give them when the operator cannot
    know the model by name."""

    model_config = CRDModel.model_config | {
        "json_schema_extra": cel(
            ("self.kvHeads <= self.attentionHeads", "kvHeads must not exceed attentionHeads", ".kvHeads"),
            (
                "self.attentionHeads % self.kvHeads == 0",
                "attentionHeads must be a multiple of kvHeads (grouped-query attention)",
                ".kvHeads",
            ),
        )
    }

    parameters: int = Field(ge=1, description="Total parameter count, e.g. 70553706496 for Llama 3 70B.")
    layers: int = Field(ge=1, le=1024, description="Transformer layers (num_hidden_layers).")
    attention_heads: int = Field(ge=1, le=1024, description="Query heads (num_attention_heads).")
    kv_heads: int = Field(ge=1, le=1024, description="Key/value heads (num_key_value_heads).")
    head_dim: int = Field(ge=1, le=1024, description="Dimension of one attention head (head_dim).")
    dtype: WeightDType = Field("bfloat16", description=(
        "Data type the checkpoint's weights are stored in. The engine serves floats (int8 only with "
        "model.quantization int8): fp8, int8 and int4 checkpoints are dequantized, and sized as bf16."))
    max_context_length: int | None = Field(
        None, ge=16, description="The model's context window (max_position_embeddings)."
    )
    hidden_size: int | None = Field(
        None, ge=1, description="hidden_size: with vocabSize, sizing counts the embedding and LM head every GPU holds."
    )
    intermediate_size: int | None = Field(
        None, ge=1, description="intermediate_size (MLP width): a tensor-parallel size must divide it."
    )
    vocab_size: int | None = Field(None, ge=1, description="vocab_size.")
    tie_word_embeddings: bool = Field(False, description="The LM head is the embedding table (tie_word_embeddings).")


class ModelSpec(CRDModel):
    """The model to serve. Leave `source` out to serve the engine's embedded SmolLM2-135M."""

    name: str | None = Field(
        None,
        max_length=253,
        description=(
            "Name clients put in the OpenAI `model` field; defaults to the LLMDeployment's name. "
            "Also used to look the architecture up in the built-in catalog (e.g. "
            "meta-llama/Meta-Llama-3-8B-Instruct)."
        ),
    )
    source: str | None = Field(
        None,
        pattern=SOURCE_PATTERN,
        description=(
            "Where the weights are: hf://org/name[@revision] (downloaded by an init container), "
            "pvc://claim/path (mounted read-only), s3://bucket/prefix (downloaded by an init "
            "container), or an absolute path inside the engine image. Empty: the embedded model."
        ),
    )
    credentials_secret: str | None = Field(
        None,
        max_length=253,
        description="Secret whose keys become environment variables of the downloader (HF_TOKEN, AWS_*).",
    )
    architecture: ArchitectureSpec | None = Field(
        None, description="Architecture for sizing; required when the catalog does not know the model."
    )
    quantization: Quantization = Field(
        "auto",
        description=(
            "auto (default): the engine's choice for the node it runs on, made at start-up: fp16 weights (as "
            "below) on an x86 CPU without AMX when engine.overrides sets no dtype, plain weights elsewhere "
            "(bf16 on GPUs and AMX CPUs); sizing counts it as none. none: the checkpoint's weights at the model's dtype. On CPU accelerators with no dtype in "
            "engine.overrides sizing counts fp32 (the widest float the engine picks there) for weights (auto, "
            "none) or the embedding (int8). "
            "int8: the engine stores the linear layers' weights as int8 with per-channel scales "
            "(quantized at load from the checkpoint's weights, GGUF Q8_0 included, which is dequantized first) "
            "and sizing counts one byte per weight (the float dtype's bytes for all of them when the architecture "
            "gives no vocabSize and hiddenSize: the embedding's share is unknown). fp16 (accelerator.type cpu only): the linear layers' weights "
            "as fp16 multiplied into fp32 activations (fbgemm), for x86 CPUs without AMX; sizing counts two bytes "
            "per such weight and fp32 for the embedding and the KV cache."
        ),
    )


class AdapterSpec(CRDModel):
    """A LoRA adapter loaded at start-up on every replica."""

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$",
        description=(
            "Name requests select the adapter by (the OpenAI `model` field); no slash: ids of the form "
            "<namespace>/<name> belong to tenants' LLMAdapters."
        ),
    )
    source: str = Field(
        pattern=SOURCE_PATTERN,
        description="Where the PEFT adapter directory is (same forms as spec.model.source).",
    )
    pinned: bool = Field(False, description="Keep the adapter resident on the GPU (never evicted).")
