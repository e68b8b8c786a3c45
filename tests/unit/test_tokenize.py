"""ChatTokenizer: piece-wise encoding equals a full encode, and the chat template renders
exactly as Hugging Face's apply_chat_template does."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chat_template import normalize_messages
from gateway.tokenize import ChatTokenizer, bytes_to_ids

SPECIALS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|endoftext|>"]
fragments = st.one_of(
    st.text(min_size=0, max_size=40),
    st.sampled_from(SPECIALS),
    st.sampled_from([" ", "\n", "\n\n", "  x", "é", "1234", "<|im_", "|>"]),
)


def full_encode(tok: ChatTokenizer, text: str) -> list[int]:
    return tok._tok.encode(text, add_special_tokens=False).ids


@settings(max_examples=300, deadline=None)
@given(st.lists(fragments, max_size=12))
def test_piecewise_encode_equals_full_encode(chat_tokenizer: ChatTokenizer, parts) -> None:
    text = "".join(parts)
    assert chat_tokenizer.piecewise
    assert bytes_to_ids(chat_tokenizer.encode(text)) == full_encode(chat_tokenizer, text)
    # A second time, answered from the piece cache, still equal.
    assert bytes_to_ids(chat_tokenizer.encode(text)) == full_encode(chat_tokenizer, text)


def test_repeated_prefix_is_served_from_the_piece_cache(chat_tokenizer: ChatTokenizer) -> None:
    system = {"role": "system", "content": "You are a careful assistant. " * 40}
    chat = [system, {"role": "user", "content": "first question"}]
    chat_tokenizer.encode(chat_tokenizer.render(chat))
    hits, misses = chat_tokenizer.cache_stats()
    chat2 = [system, {"role": "user", "content": "second question"}]
    chat_tokenizer.encode(chat_tokenizer.render(chat2))
    hits2, misses2 = chat_tokenizer.cache_stats()
    assert hits2 > hits  # the system prompt piece was not tokenized again
    assert misses2 - misses <= 2  # only the new user turn (and its header piece)


def test_large_chats_are_encoded_off_the_event_loop(chat_tokenizer: ChatTokenizer) -> None:
    chat = [{"role": "user", "content": "word " * 20000}]

    async def run() -> tuple[bytes, int]:
        ticks = 0
        task = asyncio.create_task(chat_tokenizer.encode_chat(chat))
        while not task.done():
            ticks += 1
            await asyncio.sleep(0)
        return await task, ticks

    tokens, ticks = asyncio.run(run())
    assert len(tokens) // 4 > 20000
    assert ticks > 1  # the loop kept running while the worker thread encoded


CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
     {"role": "user", "content": "and 3+3?"}],
    [{"role": "user", "content": "weather in Paris?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"}],
    [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                  {"type": "text", "text": "part two"}]}],
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize("chat", CHATS)
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_template_matches_transformers(chat_tokenizer: ChatTokenizer, tokenizer_dir: str,
                                       chat: list, tools: list | None) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    messages = normalize_messages(chat)  # what vLLM hands to the template
    ours = bytes_to_ids(chat_tokenizer.encode(
        chat_tokenizer.render(messages, tools=tools, add_generation_prompt=True)))
    theirs = hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                    tokenize=False)
    assert ours == full_encode(chat_tokenizer, theirs)
