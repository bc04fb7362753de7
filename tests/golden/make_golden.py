"""Golden reference for the C engine: the `tiny` GPT-2, its loss, gradients and 5 AdamW steps.

Writes tests/golden/tiny_golden.safetensors (see README.md next to this file) holding the initial
weights (`init.*`), their gradients (`grad.*`), the weights after 5 training steps (`final.*`),
the batch (`tokens`) and the per-step loss, gradient norm and learning rate.

Everything is float32 on the CPU with JAX's x64 mode off; weights and tokens come from one numpy
PCG64 generator, so running the script twice writes the same bytes. The model follows Hugging
Face GPT2LMHeadModel; the optimizer follows torch.optim.AdamW with global-norm clipping and the
warmup + cosine schedule of optim/lr_schedule.c.

    python3 tests/golden/make_golden.py              # write the golden file
    python3 tests/golden/make_golden.py --selfcheck  # check JAX against float64 numpy instead
"""
import argparse
import json
import math
import os
import struct

os.environ["JAX_PLATFORMS"] = "cpu"
# One thread, so the reduction order inside XLA's matmuls does not depend on the core count.
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

import jax  # noqa: E402  (the environment above must be set first)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", False)

CONFIG = dict(n_layer=2, n_head=4, n_embd=64, vocab=256, max_seq=64, B=4, T=32)
TRAIN = dict(steps=5, warmup=2, lr_max=1e-3, min_lr=1e-4, max_norm=0.5, weight_decay=0.1,
             beta1=0.9, beta2=0.95, eps=1e-8)
SEED = 1234
LN_EPS = 1e-5
STD = 0.02


def param_shapes(n_layer, n_embd, vocab, max_seq, **_):
    """HF GPT-2 names and shapes in state-dict order, which is also the order weights are drawn."""
    C = n_embd
    shapes = {"wte.weight": (vocab, C), "wpe.weight": (max_seq, C)}
    for i in range(n_layer):
        shapes.update({
            f"h.{i}.ln_1.weight": (C,), f"h.{i}.ln_1.bias": (C,),
            f"h.{i}.attn.c_attn.weight": (C, 3 * C), f"h.{i}.attn.c_attn.bias": (3 * C,),
            f"h.{i}.attn.c_proj.weight": (C, C), f"h.{i}.attn.c_proj.bias": (C,),
            f"h.{i}.ln_2.weight": (C,), f"h.{i}.ln_2.bias": (C,),
            f"h.{i}.mlp.c_fc.weight": (C, 4 * C), f"h.{i}.mlp.c_fc.bias": (4 * C,),
            f"h.{i}.mlp.c_proj.weight": (4 * C, C), f"h.{i}.mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def make_inputs():
    """Initial weights, then tokens [B, T+1], all from one PCG64(SEED) generator.

    Biases and LayerNorm parameters are random rather than 0 and 1 so that loading them and
    their gradients are really exercised.
    """
    rng = np.random.Generator(np.random.PCG64(SEED))
    resid_std = STD / math.sqrt(2 * CONFIG["n_layer"])
    params = {}
    for name, shape in param_shapes(**CONFIG).items():
        z = rng.standard_normal(shape)
        if ".ln_" in name or name.startswith("ln_f."):
            z = (1.0 if name.endswith(".weight") else 0.0) + 0.1 * z
        elif name.endswith("c_proj.weight"):
            z = resid_std * z
        else:
            z = STD * z
        params[name] = z.astype(np.float32)
    tokens = rng.integers(0, CONFIG["vocab"], size=(CONFIG["B"], CONFIG["T"] + 1), dtype=np.int32)
    return params, tokens


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def attention(x, p, n_head):
    B, T, C = x.shape
    hs = C // n_head
    qkv = x @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]
    q, k, v = (t.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, -1))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)
    scores = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), scores, -jnp.inf)
    y = jax.nn.softmax(scores, axis=-1) @ v
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"]


def mlp(x, p):
    h = gelu_tanh(x @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"])
    return h @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"]


def loss_fn(params, inputs, targets):
    """Mean cross-entropy over all B*T positions; the LM head is wte (tied)."""
    T = inputs.shape[1]
    x = params["wte.weight"][inputs] + params["wpe.weight"][:T]
    for i in range(CONFIG["n_layer"]):
        p = {k[len(f"h.{i}."):]: v for k, v in params.items() if k.startswith(f"h.{i}.")}
        x = x + attention(layer_norm(x, p["ln_1.weight"], p["ln_1.bias"]), p, CONFIG["n_head"])
        x = x + mlp(layer_norm(x, p["ln_2.weight"], p["ln_2.bias"]), p)
    x = layer_norm(x, params["ln_f.weight"], params["ln_f.bias"])
    logits = x @ params["wte.weight"].T
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


value_and_grad = jax.jit(jax.value_and_grad(loss_fn))


def lr_at(step):
    """Linear warmup, then cosine down to min_lr at the last step (optim/lr_schedule.c)."""
    t = TRAIN
    if step < t["warmup"]:
        return t["lr_max"] * (step + 1) / t["warmup"]
    progress = (step - t["warmup"]) / (t["steps"] - 1 - t["warmup"])
    return t["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t["lr_max"] - t["min_lr"])


def train(params, inputs, targets):
    """TRAIN["steps"] AdamW steps on one batch, as torch.optim.AdamW after clip_grad_norm_."""
    t = TRAIN
    params = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    losses, norms, lrs = [], [], []
    for step in range(t["steps"]):
        loss, grads = value_and_grad(params, inputs, targets)
        grads = {k: np.asarray(g) for k, g in grads.items()}
        norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
        scale = np.float32(min(1.0, t["max_norm"] / (norm + 1e-6)))
        lr = lr_at(step)
        n = step + 1
        step_size = lr / (1.0 - t["beta1"] ** n)
        correction2_sqrt = math.sqrt(1.0 - t["beta2"] ** n)
        for k, p in params.items():
            g = grads[k] * scale
            wd = t["weight_decay"] if p.ndim >= 2 else 0.0
            p *= np.float32(1.0 - lr * wd)
            m[k] = t["beta1"] * m[k] + (1.0 - t["beta1"]) * g
            v[k] = t["beta2"] * v[k] + (1.0 - t["beta2"]) * g * g
            p -= step_size * m[k] / (np.sqrt(v[k]) / correction2_sqrt + t["eps"])
        losses.append(float(loss))
        norms.append(norm)
        lrs.append(lr)
    return params, losses, norms, lrs


def write_safetensors(path, tensors, metadata):
    """Minimal safetensors writer: sorted names, little-endian data, header padded to 8 bytes."""
    dtypes = {np.dtype(np.float32): ("F32", "<f4"), np.dtype(np.int32): ("I32", "<i4")}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        tag, le = dtypes[a.dtype]
        blob = np.ascontiguousarray(a, dtype=le).tobytes()
        header[name] = {"dtype": tag, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.writelines(blobs)


def golden_tensors(params, tokens):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    loss, grads = value_and_grad(params, inputs, targets)
    final, losses, norms, lrs = train(params, inputs, targets)
    out = {"tokens": tokens, "loss_init": np.array([loss], np.float32)}
    for prefix, tree in (("init", params), ("grad", grads), ("final", final)):
        out.update({f"{prefix}.{k}": np.asarray(v, np.float32) for k, v in tree.items()})
    for key, values in (("step_loss", losses), ("step_grad_norm", norms), ("step_lr", lrs)):
        out[key] = np.array(values, np.float32)
    return out


def metadata():
    meta = {k: repr(v) for k, v in {**CONFIG, **TRAIN}.items()}
    meta.update(seed=str(SEED), layer_norm_eps=repr(LN_EPS), generator=f"jax {jax.__version__}",
                rng=f"numpy {np.__version__} Generator(PCG64({SEED}))")
    return meta


# --- --selfcheck: an independent float64 numpy model, and finite differences on it ---

def numpy_loss(params, tokens):
    """Float64 GPT-2 forward written head by head, sharing no code with the JAX model."""
    P = {k: v.astype(np.float64) for k, v in params.items()}
    n_head, C = CONFIG["n_head"], CONFIG["n_embd"]
    hs = C // n_head
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    T = inputs.shape[1]

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + LN_EPS) * P[name + ".weight"] \
            + P[name + ".bias"]

    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    x = P["wte.weight"][inputs] + P["wpe.weight"][np.arange(T)]
    for i in range(CONFIG["n_layer"]):
        h = f"h.{i}."
        qkv = np.einsum("btc,cf->btf", ln(x, h + "ln_1"), P[h + "attn.c_attn.weight"]) \
            + P[h + "attn.c_attn.bias"]
        heads = []
        for j in range(n_head):
            q, k, v = (qkv[:, :, part * C + j * hs: part * C + (j + 1) * hs] for part in range(3))
            s = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(hs)
            s[:, causal] = -np.inf
            w = np.exp(s - s.max(-1, keepdims=True))
            heads.append(np.einsum("bqk,bkd->bqd", w / w.sum(-1, keepdims=True), v))
        x = x + np.concatenate(heads, -1) @ P[h + "attn.c_proj.weight"] + P[h + "attn.c_proj.bias"]
        a = ln(x, h + "ln_2") @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"]
        a = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3)))
        x = x + a @ P[h + "mlp.c_proj.weight"] + P[h + "mlp.c_proj.bias"]
    logits = ln(x, "ln_f") @ P["wte.weight"].T
    mx = logits.max(-1, keepdims=True)
    lse = (mx + np.log(np.exp(logits - mx).sum(-1, keepdims=True)))[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def selfcheck(params, tokens):
    """Loss vs the float64 model; JAX grads vs float64 central differences at a few elements."""
    loss, grads = value_and_grad(params, tokens[:, :-1], tokens[:, 1:])
    ref = numpy_loss(params, tokens)
    rel = abs(float(loss) - ref) / abs(ref)
    print(f"loss: jax float32 {float(loss):.9f}  numpy float64 {ref:.12f}  rel {rel:.2e}")
    ok = rel < 2e-6
    rng = np.random.Generator(np.random.PCG64(0))
    h = 1e-5
    for name in ["wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.weight",
                 "h.0.attn.c_attn.bias", "h.1.attn.c_proj.weight", "h.1.ln_2.bias",
                 "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"]:
        g = np.asarray(grads[name])
        gmax = float(np.abs(g).max())
        picks = {tuple(int(i) for i in np.unravel_index(np.abs(g).argmax(), g.shape)),
                 tuple(int(rng.integers(0, s)) for s in g.shape)}
        if name == "wte.weight":  # a row used both as an input embedding and in the LM head
            picks.add((int(tokens[0, 0]), 0))
        for idx in sorted(picks):
            p64 = {k: v.astype(np.float64) for k, v in params.items()}
            p64[name][idx] += h
            up = numpy_loss(p64, tokens)
            p64[name][idx] -= 2 * h
            fd = (up - numpy_loss(p64, tokens)) / (2 * h)
            err = abs(fd - float(g[idx])) / gmax
            ok &= err < 1e-3
            print(f"grad {name}{list(idx)}: jax {float(g[idx]): .6e}  fd {fd: .6e}  "
                  f"err/max|g| {err:.1e}")
    print("selfcheck", "PASSED" if ok else "FAILED")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "tiny_golden.safetensors"))
    parser.add_argument("--selfcheck", action="store_true",
                        help="check the JAX model against float64 numpy; writes nothing")
    args = parser.parse_args()
    params, tokens = make_inputs()
    if args.selfcheck:
        raise SystemExit(0 if selfcheck(params, tokens) else 1)
    tensors = golden_tensors(params, tokens)
    write_safetensors(args.out, tensors, metadata())
    print(f"wrote {args.out}: loss_init {tensors['loss_init'][0]:.7f}")
    for i, (l, n, lr) in enumerate(zip(tensors["step_loss"], tensors["step_grad_norm"],
                                       tensors["step_lr"])):
        print(f"step {i}: loss {l:.7f}  grad_norm {n:.7f}  lr {lr:.3e}")


if __name__ == "__main__":
    main()
