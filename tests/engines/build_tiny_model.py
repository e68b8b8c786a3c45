"""Build a tiny random-weight Llama with the gateway's own tokenizer, for a real vLLM on CPU.

    python tests/engines/build_tiny_model.py TOKENIZER_DIR OUT_DIR

The weights are random (the text is gibberish, deterministic at temperature 0), but prefix
caching, KV events and metrics are vLLM's own, and since the chat template and tokenizer
are the gateway's, token parity between gateway and engine is testable. Run it with the
Python that has vLLM (it brings torch and transformers).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def build(tokenizer_dir: Path, out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    tokenizer = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    vocab = max([*tokenizer["model"]["vocab"].values(),
                 *(t["id"] for t in tokenizer["added_tokens"])]) + 1
    eos = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|im_end|>")
    pad = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|endoftext|>")
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, head_dim=32,
        max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=pad,
        eos_token_id=eos, pad_token_id=pad, torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": pad, "eos_token_id": eos, "pad_token_id": pad}))


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
