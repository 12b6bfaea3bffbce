"""`spec.kvCache`: how many tokens of KV cache each replica must hold; the input to sizing.

A budget is what users can reason about ("100 users × 4K tokens"); the operator turns it into
bytes per GPU and a tensor-parallel size. Give it as tokens or as concurrency × context, not both.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from llmop.operator.api.base import CRDModel, cel

KVDType = Literal["auto", "float32", "bfloat16", "float16", "fp8_e4m3"]


class KVCacheSpec(CRDModel):
    """KV cache budget per replica. Neither form given: one sequence of maxModelLen tokens."""

    model_config = CRDModel.model_config | {
        "json_schema_extra": cel(
            (
                "!(has(self.budgetTokens) && (has(self.concurrency) || has(self.contextLength)))",
                    "give the KV budget either as budgetTokens or as concurrency × contextLength, not both",
                    ".budgetTokens",
                ),
                (
                    "has(self.concurrency) == has(self.contextLength)",
                    "concurrency and contextLength go together",
                    ".concurrency",
                ),
        )
    }

    budget_tokens: int | None = Field(
        None, ge=1, le=2**40, description="Tokens of KV cache per replica (all sequences together)."
    )
    concurrency: int | None = Field(
        None, ge=1, le=65536, description="Sequences that must fit at once (with contextLength)."
    )
    context_length: int | None = Field(
        None, ge=16, le=16777216, description="Tokens per sequence (prompt + output) for concurrency."
    )
    block_size: int = Field(16, ge=1, le=256, description="Tokens per paged KV block.")
    dtype: KVDType = Field(
        "auto",
        description="Data type of the KV cache; auto: the model's serving dtype (bfloat16 with int8 "
        "weights, float32 with fp16 weights). fp8_e4m3 halves the bytes per token of bfloat16 (GPU attention kernels only).",
    )

    @model_validator(mode="after")
    def _one_budget_form(self) -> "KVCacheSpec":
        """The CEL rules above, for callers without an API server."""
        if self.budget_tokens is not None and (self.concurrency or self.context_length):
            raise ValueError("give the KV budget either as budgetTokens or as concurrency × contextLength, not both")
        if (self.concurrency is None) != (self.context_length is None):
            raise ValueError("concurrency and contextLength go together")
        return self
