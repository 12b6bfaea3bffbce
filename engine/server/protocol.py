"""The OpenAI wire format at the edge: pydantic models of requests and responses.

Requests are strict: a string where a number belongs is rejected, not coerced; NaN and infinities
are rejected; and an unknown field is a 400 naming it (`extra="forbid"`), never silently dropped.
Fields that OpenAI defines but this engine does not implement are declared here too, so they can
be refused by name (`sampling.check_supported`) rather than reported as unknown; the fields that
are accepted and ignored say why in docs/server.md. Sampling fields common to completions and chat
live in one base class; `sampling.to_sampling_params` is the only place they become `SamplingParams`.

The bounds those checks enforce (sampling.py, SamplingParams, tools.py) are published in the OpenAPI
document with `_doc` and `_NULL_ONLY`, schema only: validation, and so each error's message and
`param`, stays where it is. tests/server/test_schema_fuzz.py holds the two together: data valid
under the document is mostly accepted, data outside it is always refused.
"""

from __future__ import annotations

import abc
import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from llmop.engine.sampling_params import INT64_MAX, INT64_MIN


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


MAX_N = 16  # choices per request
MAX_LOGPROBS = 20  # alternatives per token (SamplingParams)


def _doc(typ, **schema):
    """`typ` whose published JSON schema also carries `schema` (bounds the server checks elsewhere)."""
    return Annotated[typ, Field(json_schema_extra=schema)]


# A field OpenAI defines that this server refuses unless absent or null (sampling.check_supported).
_NULL_ONLY = {"type": "null"}
_Text = _doc(str, minLength=1)  # stop strings and prompts: empty ones are refused
_TokenId = _doc(int, minimum=0)  # the upper bound is the model's vocabulary, published per server (app.py)
_TokenIds = _doc(list[_TokenId], minItems=1)


# --- errors -------------------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


# --- requests -----------------------------------------------------------------------------------


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # accepted, ignored: no obfuscation padding is sent


class ResponseFormatText(_Strict):
    type: Literal["text"]


class ResponseFormatJSONObject(_Strict):
    type: Literal["json_object"]


class JSONSchemaSpec(_Strict):
    name: str
    description: str | None = None
    # `schema` shadows a BaseModel attribute, hence the alias.
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatJSONSchema(_Strict):
    type: Literal["json_schema"]
    json_schema: JSONSchemaSpec


ResponseFormat = Annotated[Union[ResponseFormatText, ResponseFormatJSONObject, ResponseFormatJSONSchema],
                           Field(discriminator="type")]


class StructuredOutputs(_Strict):
    """llmop's (and vLLM's) extension: exactly one constraint on the output text."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [  # exactly one given (structured.py)
        {"required": [k], "properties": {k: {"not": {"type": "null"}}}} for k in ("json", "regex", "choice")]})

    json_: dict[str, Any] | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: _doc(list[_Text], minItems=1) | None = None


class SamplingRequest(_Strict):
    """Fields shared by /v1/completions and /v1/chat/completions (OpenAI's and vLLM's extras)."""

    model: str | None = None
    n: int = Field(1, json_schema_extra={"minimum": 1, "maximum": MAX_N})
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: _doc(float, minimum=0) | None = None
    top_p: _doc(float, exclusiveMinimum=0, maximum=1) | None = None
    top_k: _doc(int, minimum=-1, maximum=2**31 - 1) | None = None  # -1 and 0: off
    min_p: _doc(float, minimum=0, maximum=1) | None = None
    seed: _doc(int, minimum=INT64_MIN, maximum=INT64_MAX) | None = None
    stop: _Text | list[_Text] | None = None
    stop_token_ids: list[_TokenId] | None = None
    presence_penalty: _doc(float, minimum=-2, maximum=2) | None = None
    frequency_penalty: _doc(float, minimum=-2, maximum=2) | None = None
    repetition_penalty: _doc(float, exclusiveMinimum=0) | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, json_schema_extra={"minimum": 0, "description": "at most max_tokens"})
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    priority: int = Field(0, json_schema_extra={
        "description": "non-zero only from a trusted caller (the admin credential as bearer token)"})
    logit_bias: _doc(dict[str, float], propertyNames={"pattern": "^[0-9]+$"}) | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    # vLLM's extension: requests share cached prompt KV only under the same salt (docs/server.md).
    cache_salt: str | None = Field(None, min_length=1, max_length=256)
    # Accepted and ignored (docs/server.md says why).
    user: str | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # Known, refused unless off (sampling.check_supported).
    store: _doc(bool, enum=[False]) | None = None

    @abc.abstractmethod
    def requested_max_tokens(self) -> int | None:
        """The output cap the client asked for (None: the server's default)."""

    @abc.abstractmethod
    def requested_logprobs(self) -> int | None:
        """How many alternatives per token to return (None: logprobs off)."""


class CompletionRequest(SamplingRequest):
    prompt: _Text | _TokenIds | _doc(list[_Text], minItems=1) | _doc(list[_TokenIds], minItems=1)
    max_tokens: _doc(int, minimum=1) | None = 16
    logprobs: _doc(int, minimum=0, maximum=MAX_LOGPROBS) | None = None
    # Known, refused unless off (sampling.check_supported); best_of only as n.
    echo: bool = Field(False, json_schema_extra={"enum": [False]})
    suffix: _doc(str, maxLength=0) | None = None
    best_of: _doc(int, minimum=1, maximum=MAX_N, description="n or absent") | None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def requested_logprobs(self) -> int | None:
        return self.logprobs


class ContentPart(_Strict):
    """One part of a message's content. Only text is implemented; the other OpenAI part types are
    declared so that they are refused by name (chat.render_chat), not as unknown fields."""

    model_config = ConfigDict(json_schema_extra={"required": ["type", "text"]})

    type: str = Field(json_schema_extra={"enum": ["text"]})
    text: str | None = Field(None, json_schema_extra={"type": "string"})
    refusal: str | None = None
    image_url: Any = None
    input_audio: Any = None
    file: Any = None


class FunctionCall(_Strict):
    name: str
    arguments: str  # a JSON object, as text (OpenAI's shape)


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    # tools.template_inputs: a tool result names the call it answers; only assistant turns carry calls.
    model_config = ConfigDict(json_schema_extra={"allOf": [
        {"if": {"properties": {"role": {"const": "tool"}}},
         "then": {"required": ["tool_call_id"], "properties": {"tool_call_id": {"type": "string", "minLength": 1}}}},
        {"if": {"properties": {"role": {"not": {"const": "assistant"}}}},
         "then": {"properties": {"tool_calls": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}}}]})

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # assistant turns in the history
    tool_call_id: str | None = None  # tool results
    # What the SDK sends back when a previous response message is reused as history.
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: Any = None
    function_call: Any = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)


class FunctionDefinition(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(SamplingRequest):
    messages: _doc(list[ChatMessage], minItems=1)
    max_tokens: _doc(int, minimum=1) | None = None
    max_completion_tokens: _doc(int, minimum=1) | None = None
    logprobs: bool = False
    top_logprobs: _doc(int, minimum=0, maximum=MAX_LOGPROBS) | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    modalities: list[_doc(str, enum=["text"])] | None = None
    # Known, refused when given (sampling.check_supported).
    audio: Any = Field(None, json_schema_extra=_NULL_ONLY)
    prediction: Any = Field(None, json_schema_extra=_NULL_ONLY)
    reasoning_effort: Any = Field(None, json_schema_extra=_NULL_ONLY)
    verbosity: Any = Field(None, json_schema_extra=_NULL_ONLY)
    web_search_options: Any = Field(None, json_schema_extra=_NULL_ONLY)
    functions: Any = Field(None, json_schema_extra=_NULL_ONLY)
    function_call: Any = Field(None, json_schema_extra=_NULL_ONLY)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def requested_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class TokenizeRequest(_Strict):
    # Exactly one of prompt and messages (tokenize.py checks it).
    model_config = ConfigDict(json_schema_extra={"oneOf": [
        {"required": ["prompt"], "properties": {"prompt": {"type": "string"}}},
        {"required": ["messages"], "properties": {"messages": {"type": "array"}}}]})

    model: str | None = None
    prompt: str | None = None
    messages: _doc(list[ChatMessage], minItems=1) | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[_TokenId]


# --- responses ----------------------------------------------------------------------------------


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # prompt tokens served from the prefix cache


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] = Field(default_factory=list)


class ResponseFunctionCall(BaseModel):
    name: str
    arguments: str


class ResponseToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ResponseToolCall] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class DeltaFunctionCall(BaseModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall


class DeltaMessage(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "llmop"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(BaseModel):
    tokens: list[int]
    count: int
    max_model_len: int


class DetokenizeResponse(BaseModel):
    prompt: str


def dump(model: BaseModel) -> dict[str, Any]:
    """The JSON object of a response model (None fields that OpenAI omits are kept as null)."""
    return model.model_dump(mode="json")
