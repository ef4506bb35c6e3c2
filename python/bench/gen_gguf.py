"""Writes the GGUF files of BENCHMARKS.md's "GGUF" rows with llama.cpp's own ``gguf`` package
(gguf-py), and times gguf-py's ``GGUFReader`` opening them.

    python python/bench/gen_gguf.py DIR [--vocab 150000] [--tensors 300] [--big-gib 1.0]

Writes ``DIR/vocab.gguf``: a llama-style head (a ``vocab``-token vocabulary: tokens, scores,
token types, and as many merges) and ``tensors`` small tensors (q4_k blocks and float32 norms,
a few KiB each), the file ``ls`` is timed on; and ``DIR/big.gguf``: the same head and
``tensors`` tensors of about ``big-gib`` GiB in all (q4_k, q8_0 and float16 blocks of random
bytes; float16 only with ``--big-plain``, which a native file can hold), the file ``convert``
is timed on. Prints gguf-py's ``GGUFReader`` open time (best of 3,
in this process) on ``vocab.gguf``.
"""

import argparse
import os
import time

import numpy as np
import gguf

Q = gguf.GGMLQuantizationType


def head(w, vocab):
    w.add_block_count(32)
    w.add_context_length(8192)
    w.add_embedding_length(4096)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok_{i:06d}" for i in range(vocab)])
    w.add_token_scores([float(-i) for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges([f"t{i} o{i}" for i in range(vocab)])


def write(path, vocab, tensors, per_tensor, plain=False):
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama")
    head(w, vocab)
    kinds = [Q.F16] if plain else [Q.Q4_K, Q.Q8_0, Q.F16]
    for i in range(tensors):
        if per_tensor == 0:
            if i % 3 == 2:
                w.add_tensor(f"blk.{i // 3}.norm.weight", np.ones(256, dtype=np.float32))
                continue
            q = Q.Q4_K
        else:
            q = kinds[i % len(kinds)]
        block, size = gguf.GGML_QUANT_SIZES[q]
        if per_tensor == 0:
            rows, blocks = 4, 2
        else:
            blocks = 16
            rows = max(1, per_tensor // (blocks * size))
        raw = rng.integers(0, 256, (rows, blocks * size), dtype=np.uint8)
        if q == Q.F16:
            w.add_tensor(f"blk.{i // 3}.t{i}.weight", raw.view(np.float16))
        else:
            w.add_tensor(f"blk.{i // 3}.t{i}.weight", raw, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--vocab", type=int, default=150_000)
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--big-gib", type=float, default=1.0)
    ap.add_argument("--big-plain", action="store_true", help="big.gguf of float16 tensors only")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    small = os.path.join(a.dir, "vocab.gguf")
    write(small, a.vocab, a.tensors, 0)
    print(f"{small}: {os.path.getsize(small)} bytes")
    if a.big_gib > 0:
        big = os.path.join(a.dir, "big.gguf")
        write(big, a.vocab, a.tensors, int(a.big_gib * (1 << 30) / a.tensors), a.big_plain)
        print(f"{big}: {os.path.getsize(big)} bytes")
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        r = gguf.GGUFReader(small)
        _ = [t.name for t in r.tensors]
        best = min(best, time.perf_counter() - t)
    print(f"gguf-py GGUFReader open + tensor names, {small}: {best * 1000:.1f} ms (best of 3)")


if __name__ == "__main__":
    main()
