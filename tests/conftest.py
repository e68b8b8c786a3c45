"""Shared fixtures: the real Qwen3 chat tokenizer (fetched by `make tokenizer`)."""

from __future__ import annotations

import pytest

from gateway.config import DEFAULT_TOKENIZER
from gateway.tokenize import ChatTokenizer


@pytest.fixture(scope="session")
def tokenizer_dir() -> str:
    if not (DEFAULT_TOKENIZER / "tokenizer.json").exists():
        pytest.fail("the Qwen3 tokenizer is missing: run `make tokenizer` (make test does)")
    return str(DEFAULT_TOKENIZER)


@pytest.fixture(scope="session")
def chat_tokenizer(tokenizer_dir: str) -> ChatTokenizer:
    tok = ChatTokenizer.from_dir(tokenizer_dir)
    yield tok
    tok.close()
