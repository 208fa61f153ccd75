#!/usr/bin/env python3
"""Writes a llama-architecture GGUF with random Q4_0 weights, for end-to-end runs of the row-tiled
Q4_0 kernel on matrices of at least 4096 rows (no model download needed).

Shapes (defaults): n_embd 4096, n_ff 14336, 32 heads, 8 KV heads, 8 layers, a 32000-token SentencePiece
("llama") vocabulary of byte tokens, single characters and filler pieces. Every matrix is Q4_0 with
uniform random nibbles and a per-block scale of fixed size and random sign, sized so that a weight's
standard deviation is 1/sqrt(fan-in); norms are 1. The bytes depend only on --seed, so two runs write
the same file. Greedy decoding of such a model is deterministic, which is all the comparison of two
builds needs. Needs numpy and the gguf package (llama.cpp's gguf-py; put it on PYTHONPATH).

Q4_0 matrices (rows x row length) with the defaults: attn_q, attn_output 4096 x 4096; attn_k, attn_v
1024 x 4096; ffn_gate, ffn_up 14336 x 4096; ffn_down 4096 x 14336; output 32000 x 4096.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import numpy as np

import gguf

QK = 32
# E[(q - 8)^2] for q uniform in 0..15
Q4_0_VAR = sum((q - 8) ** 2 for q in range(16)) / 16.0


def q4_0_matrix(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Raw Q4_0 bytes [rows, cols/32*18]: fp16 scale, then 16 bytes of nibbles per block."""
    nb = cols // QK
    d = np.float16(1.0 / np.sqrt(cols) / np.sqrt(Q4_0_VAR))
    scales = np.where(rng.random((rows, nb)) < 0.5, -d, d).astype(np.float16)
    raw = np.empty((rows, nb, 18), dtype=np.uint8)
    raw[:, :, 0:2] = scales.reshape(rows, nb, 1).view(np.uint8)
    raw[:, :, 2:] = rng.integers(0, 256, size=(rows, nb, 16), dtype=np.uint8)
    return raw.reshape(rows, nb * 18)


def vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    chars = [chr(c) for c in range(33, 127)]
    pieces = ["\u2581"] + chars + ["\u2581" + c for c in chars]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    i = 0
    while len(tokens) < n_vocab:
        tokens.append(f"\u2581w{i}")
        types.append(gguf.TokenType.NORMAL)
        i += 1
    scores = [0.0] * 3 + [0.0] * 256 + [-float(k) for k in range(len(tokens) - 259)]
    return tokens[:n_vocab], scores[:n_vocab], [int(t) for t in types[:n_vocab]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--embd", type=int, default=4096)
    ap.add_argument("--ff", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=20261130)
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    head_dim = a.embd // a.heads
    kv_dim = head_dim * a.kv_heads
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("random-llama-q4_0")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    tokens, scores, types = vocab(a.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    q4 = gguf.GGMLQuantizationType.Q4_0
    ones = np.ones(a.embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", q4_0_matrix(rng, a.vocab, a.embd), raw_dtype=q4)
    for i in range(a.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.attn_q.weight", q4_0_matrix(rng, a.embd, a.embd), raw_dtype=q4)
        w.add_tensor(f"blk.{i}.attn_k.weight", q4_0_matrix(rng, kv_dim, a.embd), raw_dtype=q4)
        w.add_tensor(f"blk.{i}.attn_v.weight", q4_0_matrix(rng, kv_dim, a.embd), raw_dtype=q4)
        w.add_tensor(f"blk.{i}.attn_output.weight", q4_0_matrix(rng, a.embd, a.embd), raw_dtype=q4)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_gate.weight", q4_0_matrix(rng, a.ff, a.embd), raw_dtype=q4)
        w.add_tensor(f"blk.{i}.ffn_up.weight", q4_0_matrix(rng, a.ff, a.embd), raw_dtype=q4)
        w.add_tensor(f"blk.{i}.ffn_down.weight", q4_0_matrix(rng, a.embd, a.ff), raw_dtype=q4)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", q4_0_matrix(rng, a.vocab, a.embd), raw_dtype=q4)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    h = hashlib.sha256()
    with open(a.out, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    print(f"wrote {a.out}: {a.layers} layers, n_embd {a.embd}, n_ff {a.ff}, vocab {a.vocab}, sha256 {h.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
