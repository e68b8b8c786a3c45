"""Find a tokenizer: a local directory, or a Hugging Face Hub id (when the hub is reachable)."""

from __future__ import annotations

from pathlib import Path

NEEDED = ("tokenizer.json", "tokenizer_config.json")
OPTIONAL = ("chat_template.jinja", "special_tokens_map.json")


def resolve_tokenizer(spec: str) -> Path:
    """``spec`` is a directory holding ``tokenizer.json`` or a hub id such as ``Qwen/Qwen3-8B``."""
    path = Path(spec).expanduser()
    if (path / "tokenizer.json").is_file():
        return path
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise FileNotFoundError(
            f"no tokenizer.json in {spec!r}; run `make tokenizer` for the default tokenizer "
            "or pass --tokenizer DIR|HUB_ID")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FileNotFoundError(
            f"{spec!r} is not a local directory and huggingface_hub is not installed "
            "(pip install huggingface_hub) to fetch it") from None
    return Path(snapshot_download(spec, allow_patterns=[*NEEDED, *OPTIONAL]))
