"""Message normalisation follows vLLM; rendering errors become ChatInputError."""

from __future__ import annotations

import pytest

from gateway.chat_template import ChatInputError, ChatTemplate, normalize_messages


@pytest.mark.parametrize(
    ("message", "content"),
    [
        ({"role": "user", "content": "plain"}, "plain"),
        ({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                       "text": "b"}]}, "a\nb"),
        ({"role": "user", "content": [{"type": "text", "text": ""}, "b"]}, "b"),
        ({"role": "user", "content": [{"type": "input_text", "text": "x"}]}, "x"),
        ({"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}, "no"),
        ({"role": "assistant", "content": None, "tool_calls": []}, ""),
    ],
)
def test_content_is_joined_like_vllm(message: dict, content: str) -> None:
    assert normalize_messages([message])[0]["content"] == content


@pytest.mark.parametrize(
    ("arguments", "parsed"),
    [('{"a": 1}', {"a": 1}), ("", {}), ("not json", {}), ("[1, 2]", {}), ({"b": 2}, {"b": 2})],
)
def test_tool_call_arguments_become_objects(arguments: object, parsed: dict) -> None:
    message = {"role": "assistant", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
    out = normalize_messages([message])[0]
    assert out["tool_calls"][0]["function"]["arguments"] == parsed


def test_reasoning_is_copied_to_reasoning_content() -> None:
    out = normalize_messages([{"role": "assistant", "content": "x", "reasoning": "why"}])[0]
    assert out["reasoning"] == out["reasoning_content"] == "why"


def test_image_parts_are_rejected_with_the_field_named() -> None:
    with pytest.raises(ChatInputError) as err:
        normalize_messages([{"role": "user", "content": [{"type": "image_url"}]}])
    assert err.value.param == "messages[0].content"


def test_template_errors_are_input_errors() -> None:
    template = ChatTemplate("{{ raise_exception('no system role') }}")
    with pytest.raises(ChatInputError, match="no system role"):
        template.render([{"role": "user", "content": "x"}])


def test_tojson_does_not_escape_html_and_keeps_unicode() -> None:
    template = ChatTemplate("{{ tools | tojson }}")
    assert template.render([], tools=[{"d": "<a> é"}]) == '[{"d": "<a> é"}]'


def test_continue_final_message_cuts_after_the_last_message() -> None:
    template = ChatTemplate("{% for m in messages %}[{{ m.content }}]{% endfor %}END")
    text = template.render([{"role": "assistant", "content": "partial"}],
                           add_generation_prompt=False, continue_final_message=True)
    assert text == "[partial"
