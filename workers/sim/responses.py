"""Response bodies in vLLM's exact shapes (see the recorded vLLM 0.32 fixtures)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

FINGERPRINT = "radixgate-sim-0.1.0"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion, "prompt_tokens_details": {"cached_tokens": cached}}


def chat_body(rid: str, model: str, text: str, finish: str, use: dict) -> dict[str, Any]:
    message = {"role": "assistant", "content": text, "refusal": None, "annotations": None,
               "audio": None, "function_call": None, "tool_calls": [], "reasoning": None}
    return {"id": rid, "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish, "stop_reason": None, "token_ids": None}],
            "service_tier": None, "system_fingerprint": FINGERPRINT, "usage": use,
            "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None}


def completion_body(rid: str, model: str, text: str, finish: str, use: dict) -> dict[str, Any]:
    return {"id": rid, "object": "text_completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                         "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                         "prompt_token_ids": None}],
            "service_tier": None, "system_fingerprint": FINGERPRINT, "usage": use,
            "kv_transfer_params": None}


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"


class ChunkWriter:
    """Streamed chunks of one response, chat or completion."""

    def __init__(self, rid: str, model: str, chat: bool) -> None:
        self.head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": int(time.time()), "model": model}
        self.chat = chat

    def role(self) -> bytes:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return sse({**self.head, "choices": [choice], "prompt_token_ids": None})

    def token(self, text: str, finish: str | None) -> bytes:
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None,
                      "finish_reason": finish, "token_ids": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                      "token_ids": None}
        if finish is not None:
            choice["stop_reason"] = None
        return sse({**self.head, "choices": [choice]})

    def usage(self, use: dict) -> bytes:
        return sse({**self.head, "choices": [], "usage": use,
                    "system_fingerprint": FINGERPRINT})


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param,
                                   "code": status}})
