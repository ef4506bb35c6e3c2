"""Weights and ZipNN's figures for the lossless-compression benchmark (BENCHMARKS.md, issue 40).

    python benches/lossless_weights.py DIR          # train, write DIR/real.{bf16,fp16,fp32,fp8}.bin
    python benches/lossless_weights.py DIR --zipnn  # ZipNN on every DIR/*.bin (one thread, 2 threads)

The "real" weights are those of a small MLP (5 linear layers of 1024, 6.3M parameters) trained
for 300 steps of Adam on a synthetic regression task, as a training run's checkpoint holds them;
the other dtypes are the same weights cast. `examples/lossless_bench.rs` writes the synthetic
files and measures paramdex on the same bytes.
"""
import sys, os, time, glob

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "float8_e4m3fn"}


def train(out):
    import torch
    torch.manual_seed(0)
    d = 1024
    layers = []
    for i in range(5):
        layers += [torch.nn.Linear(d, d), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    target = torch.nn.Linear(d, d)
    for step in range(300):
        x = torch.randn(64, d)
        loss = torch.nn.functional.mse_loss(model(x), target(x).detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    for name, dt in DTYPES.items():
        t = flat.to(getattr(torch, dt))
        with open(os.path.join(out, f"real.{name}.bin"), "wb") as f:
            f.write(t.view(torch.uint8).numpy().tobytes())
    print(f"trained: {flat.numel()} parameters, final loss {loss.item():.4f}")


def zipnn(out):
    from zipnn import ZipNN
    for path in sorted(glob.glob(os.path.join(out, "*.bin"))):
        kind = path.rsplit(".", 2)[-2]
        original = open(path, "rb").read()
        for threads in (1, 2):
            z = ZipNN(input_format="byte", bytearray_dtype=DTYPES[kind], threads=threads)
            best_c = best_d = 1e9
            for _ in range(3):
                # ZipNN 0.5.4 reorders the bits of its input in place (the sign bit of bf16 and
                # fp32): each run gets a fresh copy, and the output is compared with the file.
                data = bytes(bytearray(original))
                t = time.perf_counter(); c = z.compress(data); best_c = min(best_c, time.perf_counter() - t)
                t = time.perf_counter(); d = z.decompress(c); best_d = min(best_d, time.perf_counter() - t)
            ok = bytes(d) == original
            print(f"zipnn {os.path.basename(path):14} threads {threads} ratio {len(data)/len(c):.4f} "
                  f"encode {len(data)/best_c/1e9:.2f} GB/s decode {len(data)/best_d/1e9:.2f} GB/s"
                  f"{'' if ok else ' (DOES NOT ROUND-TRIP)'}")


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if "--zipnn" in sys.argv:
        zipnn(out)
    else:
        train(out)
