#!/usr/bin/env python3
"""golden_cli.py - turns tiny_golden.safetensors into what `shardtrain train` reads, and checks
what the CLI wrote against the golden values. Standard library only (no numpy on test machines).

  golden_cli.py prepare GOLDEN OUT_DIR
      writes OUT_DIR/init.safetensors (the `init.*` tensors, prefix stripped: what --init-from
      reads) and one llm.c token shard per golden sequence, OUT_DIR/golden_NNNNNN.bin, and
      prints the `train` flags that reproduce the golden run, one per line.
  golden_cli.py check GOLDEN METRICS EXPORT
      compares the metrics lines and the export of such a run with the golden file; exits 1
      on any difference beyond the tolerances below.

Why one shard per sequence: the golden batch holds 4 independent rows of 33 tokens, while the
token loader cuts contiguous text, so the last target of one sequence is the first input of
the next. A shard of exactly 33 tokens holds one sequence; the loader's stream of sequences
goes on to the next shard and wraps after the last, so a global batch of 4 sequences (here 4
micro-batches of 1: --grad-accum 4) reads the 4 rows in order at every step, the golden batch
trained 5 times. Accumulating 4 micro-batches of 1 gives the mean over the same 128 tokens as
one batch of 4.
"""
import array
import json
import math
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256

# What the golden run used that no `train` flag sets: the engine's fixed AdamW betas and eps
# (optim/adamw.h ADAMW_HPARAMS_DEFAULT) and LayerNorm eps. A golden file made with other
# values cannot be reproduced through the CLI, and `prepare` says so instead of failing later.
FIXED = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "layer_norm_eps": 1e-5}

# Tolerances: as golden_test.c for the loss, grad norm and lr of every step (relative); the
# export in the Frobenius norm per tensor, as tests/golden/README.md argues (Adam amplifies
# rounding noise on near-zero gradients in the max-norm; the worst Frobenius difference of an
# independent PyTorch replay was 1.5e-5, while dropping weight decay moves it by 3.1e-4).
LOSS_RTOL = NORM_RTOL = 1e-5
LR_RTOL = 1e-6
EXPORT_RTOL = 1e-4


def read_safetensors(path):
    """(metadata, {name: (dtype, shape, raw bytes)}) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], raw[8 + n + a:8 + n + b])
    return meta, out


def values(entry):
    """The elements of an F32 or I32 tensor as a flat array, after checking that the byte range
    holds exactly the shape's elements."""
    dtype, shape, data = entry
    a = array.array({"F32": "f", "I32": "i"}[dtype], data)
    if len(a) != math.prod(shape):
        raise SystemExit(f"golden_cli: {len(a)} elements where shape {shape} needs "
                         f"{math.prod(shape)}")
    return a


def write_init(path, tensors):
    """A safetensors file of the `init.*` tensors under their Hugging Face names."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        if not name.startswith("init."):
            continue
        dtype, shape, data = tensors[name]
        header[name[len("init."):]] = {"dtype": dtype, "shape": shape,
                                       "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.writelines(blobs)


def write_shard(path, tokens):
    header = struct.pack("<3i", MAGIC, VERSION, len(tokens)) + bytes(4 * (HEADER_INTS - 3))
    with open(path, "wb") as f:
        f.write(header + struct.pack(f"<{len(tokens)}H", *tokens))


def prepare(golden, out_dir):
    meta, tensors = read_safetensors(golden)
    for key, want in FIXED.items():
        if float(meta[key]) != want:
            raise SystemExit(f"golden_cli: the golden run used {key} {meta[key]}; shardtrain "
                             f"train has no flag for it and uses {want}")
    B, T = int(meta["B"]), int(meta["T"])
    tokens = values(tensors["tokens"])
    if tensors["tokens"][1] != [B, T + 1]:
        raise SystemExit(f"golden_cli: tokens {tensors['tokens'][1]}, expected {[B, T + 1]}")
    for b in range(B):
        write_shard(f"{out_dir}/golden_{b:06d}.bin", tokens[b * (T + 1):(b + 1) * (T + 1)])
    write_init(f"{out_dir}/init.safetensors", tensors)
    # --seq-len T: the model then has T positions, and import takes the first T rows of the
    # golden wpe (its other rows never meet a token, so the losses and norms are unchanged).
    flags = ["--model", "tiny", "--n-layer", meta["n_layer"], "--n-head", meta["n_head"],
             "--n-embd", meta["n_embd"], "--vocab", meta["vocab"], "--seq-len", str(T),
             "--micro-batch", "1", "--grad-accum", str(B), "--steps", meta["steps"],
             "--lr", meta["lr_max"], "--min-lr", meta["min_lr"], "--warmup", meta["warmup"],
             "--lr-schedule", "cosine", "--weight-decay", meta["weight_decay"],
             "--clip", meta["max_norm"], "--param-dtype", "fp32", "--reduce-dtype", "fp32",
             "--init-from", f"{out_dir}/init.safetensors",
             "--data-train", f"{out_dir}/golden_*.bin"]
    print("\n".join(flags))
    return 0


def relative(got, want):
    return abs(got - want) / abs(want)


def check(golden, metrics_path, export_path):
    meta, tensors = read_safetensors(golden)
    B, T, steps = int(meta["B"]), int(meta["T"]), int(meta["steps"])
    ref = {k: values(tensors[k]) for k in ("step_loss", "step_grad_norm", "step_lr")}
    with open(metrics_path) as f:
        rows = [json.loads(line) for line in f]
    fail = []
    if [r["step"] for r in rows] != list(range(steps)):
        fail.append(f"metrics steps {[r['step'] for r in rows]}, expected 0..{steps - 1}")
    worst = {"loss": 0.0, "grad_norm": 0.0, "lr": 0.0}
    for r in rows[:steps]:
        s = r["step"]
        for key, golden_key, tol in (("loss", "step_loss", LOSS_RTOL),
                                     ("grad_norm", "step_grad_norm", NORM_RTOL),
                                     ("lr", "step_lr", LR_RTOL)):
            if r[key] is None:
                fail.append(f"step {s} {key} is not finite")
                continue
            rel = relative(r[key], ref[golden_key][s])
            worst[key] = max(worst[key], rel)
            if rel > tol:
                fail.append(f"step {s} {key} {r[key]!r}, golden {ref[golden_key][s]!r} "
                            f"(relative {rel:.2e} > {tol:.0e})")
        if r["tokens"] != B * T * (s + 1):  # the golden batch at every step
            fail.append(f"step {s} tokens {r['tokens']}, expected {B * T * (s + 1)}")
        if r["dtypes"] != {"param": "fp32", "reduce": "fp32"}:
            fail.append(f"step {s} dtypes {r['dtypes']}, the golden run is fp32")

    _, exported = read_safetensors(export_path)
    want_names = {k[len("final."):] for k in tensors if k.startswith("final.")}
    if set(exported) != want_names:
        fail.append(f"export names differ from the golden final.*: "
                    f"{sorted(set(exported) ^ want_names)}")
    worst_export = 0.0
    for name in sorted(want_names & set(exported)):
        dtype, shape, _ = tensors["final." + name]
        want = values(tensors["final." + name])
        got_shape = exported[name][1]
        if name == "wpe.weight":  # the run has T positions: the golden's first T rows
            shape = [T] + shape[1:]
            want = want[:math.prod(shape)]
        if got_shape != shape:
            fail.append(f"export {name}: shape {got_shape}, golden {shape}")
            continue
        got = values(exported[name])
        err = math.sqrt(sum((x - y) ** 2 for x, y in zip(got, want)))
        rel = err / max(math.sqrt(sum(y * y for y in want)), 1e-30)
        worst_export = max(worst_export, rel)
        if rel > EXPORT_RTOL:
            fail.append(f"export {name} differs from golden final.{name} by {rel:.2e} "
                        f"(Frobenius, > {EXPORT_RTOL:.0e})")
    print(f"against the golden file: worst relative loss {worst['loss']:.2e}, grad norm "
          f"{worst['grad_norm']:.2e}, lr {worst['lr']:.2e}, exported tensor {worst_export:.2e}")
    for f in fail:
        print("FAIL:", f)
    return 1 if fail else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "prepare":
        return prepare(argv[2], argv[3])
    if len(argv) == 5 and argv[1] == "check":
        return check(argv[2], argv[3], argv[4])
    print(__doc__.split("\n\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
