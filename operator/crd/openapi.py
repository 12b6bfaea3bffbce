"""Turn a pydantic model's JSON Schema into a Kubernetes *structural* OpenAPI v3 schema.

Kubernetes accepts a subset of OpenAPI v3 for CRDs: no `$ref`, no `title`, no `const`, no `null`
type, boolean `exclusiveMinimum`, `anyOf` only without types inside. Pydantic emits JSON Schema
2020-12; this module rewrites one into the other, so the models stay the single source.

Rules worth knowing:
- `X | None` becomes plain `X`, not required: absent means None.
- `Literal["auto"] | int` becomes `x-kubernetes-int-or-string` (keep a CEL rule beside it).
- `dict[str, Any]` becomes an object that preserves unknown fields.
- a field built by a `default_factory` gets that default (an all-default model becomes `{}`), so the
  API server fills nested defaults in and `kubectl get -o yaml` shows what will be used.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticUndefined, core_schema

_DROP = {"title", "$defs", "$schema"}


class _CRDJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, but defaults built by factories are reported too."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()
        return super().get_default_value(schema)

    def encode_default(self, dft: Any) -> Any:
        return _encode(dft)


def _encode(value: Any) -> Any:
    if isinstance(value, BaseModel):
        if value == type(value)():
            return {}
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of `model` (camelCase field names)."""
    raw = model.model_json_schema(by_alias=True, schema_generator=_CRDJsonSchema)
    defs = raw.get("$defs", {})
    return _convert(raw, defs)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a `$ref` (keeping the referring node's own description/default)."""
    if "$ref" not in node:
        return node
    target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
    extra = {k: v for k, v in node.items() if k != "$ref"}
    # The field's description is more specific than the model's docstring.
    return _resolve(target, defs) | extra


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, defs)
    if "anyOf" in node:
        node = _collapse_any_of(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs)
        elif key == "additionalProperties":
            if value is False:
                continue  # structural schemas prune unknown fields already
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out["additionalProperties"] = _convert(value, defs)
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "required" in out:
        out["required"] = sorted(out["required"])
    return out


def _collapse_any_of(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`X | None` → X; `Literal[str] | int` → int-or-string; anything else is a modelling error."""
    branches = [_resolve(b, defs) for b in node["anyOf"] if b.get("type") != "null"]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if len(branches) == 1:
        return branches[0] | rest
    types = {b.get("type") for b in branches}
    if types == {"string", "integer"}:
        return {"x-kubernetes-int-or-string": True} | rest
    raise ValueError(f"cannot express this union in a structural schema: {node['anyOf']}")


def walk(schema: dict[str, Any], path: str = ""):
    """Yield (path, node) for every property, item and map value below `schema`."""
    for name, sub in schema.get("properties", {}).items():
        yield f"{path}.{name}", sub
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield f"{path}[]", schema["items"]
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


__all__ = ["PydanticUndefined", "structural_schema", "walk"]
