"""Render a chat exactly as the engine will: the model's Jinja chat template, HF semantics.

The gateway must produce the very token ids the engine computes, or its prefix index names
the wrong blocks. Two layers matter:

* **Message normalisation, as vLLM does it** before rendering: text content parts joined
  with ``"\\n"`` (empty parts dropped), ``content: null`` → ``""``, tool-call ``arguments``
  JSON strings parsed into objects (invalid or non-object → ``{}``), ``reasoning`` copied
  to ``reasoning_content``; tools passed as full ``{"type": "function", ...}`` dicts.
* **Rendering, as Hugging Face does it** (``transformers`` ``apply_chat_template``): an
  immutable sandboxed Jinja environment with ``trim_blocks``/``lstrip_blocks`` and loop
  controls, a ``tojson`` filter that does not HTML-escape, ``raise_exception`` and
  ``strftime_now`` globals, the tokenizer's special tokens as variables, request
  ``chat_template_kwargs`` on top.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEXT_PART_TYPES = {"text": "text", "input_text": "text", "output_text": "text",
                   "refusal": "refusal", "thinking": "thinking"}
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


class ChatInputError(ValueError):
    """A chat the template cannot render; ``param`` names the offending request field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _token_content(token: Any) -> str | None:
    """A special token from tokenizer_config.json: a string or a serialised AddedToken."""
    if isinstance(token, dict):
        return token.get("content")
    return token


class ChatTemplate:
    """A compiled chat template plus the special-token variables it may reference."""

    def __init__(self, source: str, special_tokens: dict[str, Any] | None = None) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.source = source
        self._template = env.from_string(source)
        self._special = dict(special_tokens or {})

    @classmethod
    def from_dir(cls, directory: str | Path) -> ChatTemplate:
        """Load ``chat_template.jinja`` or the ``chat_template`` of ``tokenizer_config.json``."""
        directory = Path(directory)
        config = json.loads((directory / "tokenizer_config.json").read_text())
        jinja_file = directory / "chat_template.jinja"
        if jinja_file.exists():
            source = jinja_file.read_text()
        else:
            source = config.get("chat_template")
            if isinstance(source, list):  # named templates: take "default"
                named = {t["name"]: t["template"] for t in source}
                source = named.get("default") or next(iter(named.values()))
        if not source:
            raise ValueError(f"{directory}: tokenizer has no chat template")
        special: dict[str, Any] = {}
        for name in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                     "cls_token", "mask_token"):
            if name in config:
                special[name] = _token_content(config[name])
        extra = config.get("additional_special_tokens")
        if extra:
            special["additional_special_tokens"] = [_token_content(t) for t in extra]
        return cls(source, special)

    def render(self, messages: list[dict[str, Any]], *, tools: list[dict] | None = None,
               add_generation_prompt: bool = True, continue_final_message: bool = False,
               documents: list[dict] | None = None, **kwargs: Any) -> str:
        """Render normalised ``messages`` to the prompt text the engine will tokenize."""
        if continue_final_message and add_generation_prompt:
            raise ChatInputError("continue_final_message and add_generation_prompt are "
                                 "mutually exclusive", "continue_final_message")
        if continue_final_message:
            if not messages:
                raise ChatInputError("continue_final_message needs a message", "messages")
            last = dict(messages[-1])
            last["content"] = (last.get("content") or "") + _CONTINUE_TAG
            messages = [*messages[:-1], last]
        variables = {**self._special, **kwargs}
        try:
            text = self._template.render(
                messages=messages, tools=tools, documents=documents,
                add_generation_prompt=add_generation_prompt, **variables,
            )
        except jinja2.exceptions.TemplateError as exc:
            raise ChatInputError(f"chat template error: {exc}", "messages") from exc
        except (TypeError, AttributeError, KeyError, IndexError) as exc:
            raise ChatInputError(f"chat template cannot render these messages: {exc}",
                                 "messages") from exc
        if continue_final_message:
            cut = text.rfind(_CONTINUE_TAG.strip())
            if cut < 0:
                raise ChatInputError("continue_final_message: final message not rendered",
                                     "messages")
            text = text[:cut]
        return text


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages → the conversation vLLM hands to a "string" content template."""
    return [_normalize_message(m, i) for i, m in enumerate(messages)]


def _normalize_message(message: dict[str, Any], i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    out: dict[str, Any] = {"role": message["role"], "content": _join_content(message, where)}
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    if "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    if message["role"] == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls:
            out["tool_calls"] = [_normalize_tool_call(c, f"{where}.tool_calls")
                                 for c in tool_calls]
        if message.get("reasoning") is not None:
            out["reasoning"] = out["reasoning_content"] = message["reasoning"]
    return out


def _join_content(message: dict[str, Any], where: str) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatInputError(f"{where}.content must be a string or a list of parts",
                             f"{where}.content")
    texts = []
    for part in content:
        if isinstance(part, str):
            text = part
        elif isinstance(part, dict) and part.get("type") in TEXT_PART_TYPES:
            text = part.get(TEXT_PART_TYPES[part["type"]])
            if text is not None and not isinstance(text, str):
                raise ChatInputError(f"{where}.content: text must be a string",
                                     f"{where}.content")
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ChatInputError(f"unsupported chat content part type: {kind!r} (this model "
                                 "takes text only)", f"{where}.content")
        if text:
            texts.append(text)
    return "\n".join(texts)


def _normalize_tool_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise ChatInputError("only function tool calls are supported", where)
    call = dict(call)
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments else {}
        except ValueError:
            arguments = {}
    function["arguments"] = arguments if isinstance(arguments, dict) else {}
    call["function"] = function
    return call
