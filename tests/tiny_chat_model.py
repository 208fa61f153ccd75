"""Writes a tiny llama-architecture GGUF with random float32 weights and a given chat
template, so that a real llama-server can load it in a second and render that template
(``POST /apply-template``) or log where its layers went. Its answers are noise; the
template, the vocabulary and the load are real.

Shapes: n_embd 64, 4 heads, 2 layers, n_ff 128, a SentencePiece ("llama") vocabulary of
the 256 byte tokens, the printable ASCII characters and a few control tokens. The bytes
depend only on the seed.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

EMBD, HEADS, LAYERS, FF, CTX = 64, 4, 2, 128, 512


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(33, 127)]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


def write_tiny_model(path: Path, *, chat_template: str | None, seed: int = 1) -> Path:
    """Write the model to ``path`` (with ``chat_template`` as tokenizer.chat_template when given)."""
    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-chat-test")
    w.add_context_length(CTX)
    w.add_embedding_length(EMBD)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(EMBD // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    ones = np.ones(EMBD, dtype=np.float32)
    w.add_tensor("token_embd.weight", matrix(len(tokens), EMBD))
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", matrix(EMBD, EMBD))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(FF, EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", matrix(FF, EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", matrix(EMBD, FF))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", matrix(len(tokens), EMBD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
