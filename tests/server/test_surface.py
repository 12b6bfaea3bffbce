"""Every request field the server declares is documented in docs/server.md (implemented, refused or
ignored with a reason), so a new field cannot slip in undocumented; and each refused one is refused."""

import re
from pathlib import Path

import pytest

from llmop.engine.server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest, StreamOptions
from llmop.engine.server.sampling import _REFUSED_CHAT

DOC = (Path(__file__).parents[2] / "docs" / "server.md").read_text()
MODELS = [CompletionRequest, ChatCompletionRequest, ChatMessage, StreamOptions]


def _wire_names(model):
    return {f.alias or name for name, f in model.model_fields.items()}


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
def test_every_field_is_in_the_docs(model):
    documented = {word for code in re.findall(r"`([^`]+)`", DOC) for word in re.findall(r"[a-z_]+", code)}
    missing = _wire_names(model) - documented - {"role", "content", "name", "messages", "prompt"}
    assert not missing, f"fields of {model.__name__} not in docs/server.md: {sorted(missing)}"


@pytest.mark.parametrize("field", sorted(_REFUSED_CHAT))
def test_each_refused_chat_field_is_refused_by_name(openai_client, field):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "x"}],
                                              max_completion_tokens=1, extra_body={field: "x"})
    assert e.value.body["param"] == field
