"""`spec.parallelism`: tensor parallelism chosen by sizing (`auto`) or pinned to a number."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmop.operator.api.base import CRDModel


class ParallelismSpec(CRDModel):
    """How many GPUs one replica spans."""

    tensor: Literal["auto"] | int = Field(
        "auto",
        description=(
            "`auto`: the smallest size that fits the KV budget (see status.sizing); or a number of "
            "GPUs, which sizing then checks."
        ),
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "type(self) == string ? self == 'auto' : (self >= 1 && self <= 64)",
                    "message": "tensor must be 'auto' or a number of GPUs from 1 to 64",
                }
            ]
        },
    )
