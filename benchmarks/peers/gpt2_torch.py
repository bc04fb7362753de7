#!/usr/bin/env python3
"""gpt2_torch.py - the PyTorch peer of the GPU benchmark: shardtrain's GPT-2, trained the way a
PyTorch user would on one GPU, timed the way benchmarks/gpu_bench.sh times shardtrain.

    python3 benchmarks/peers/gpt2_torch.py --model d12 --micro-batch 16 [--fsdp2]

The model is shardtrain's (engine/model/gpt_config.c, docs/CLI.md "Models"): token and learned
position embeddings, pre-LayerNorm blocks (eps 1e-5) of causal attention with fused qkv and a
tanh-GELU MLP of width 4C, a final LayerNorm and an LM head tied to the token embedding, the
vocabulary padded to a multiple of 128 (here the padding rows take part in the softmax: the
work is the same), initialised N(0, 0.02) with the residual projections N(0, 0.02/sqrt(2L)).
Training: random tokens (one step's worth, drawn on the device once and trained on at every
step, so the loss falls from about ln(50304) by memorising them), bf16 autocast,
F.scaled_dot_product_attention(is_causal=True), torch.compile, fused AdamW (lr 6e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1 on tensors of rank >= 2), gradient clipping at norm 1,
micro-batches accumulated to --batch-tokens per step.
With --fsdp2 every block and then the model are wrapped with fully_shard at world 1 (one process,
an in-memory store), params and reductions in bf16 as shardtrain's `--param-dtype bf16
--reduce-dtype bf16`, each block compiled on its own (FSDP2's hooks sit between blocks), and
gradients reduced on the last micro-batch only.

After --warmup steps (the first compiles), --steps steps are timed between two
torch.cuda.synchronize(): tokens/s is their tokens over that time; the peak memory is
torch.cuda.max_memory_allocated() over the whole run. Prints a summary line, then one
`result {json}` line (benchmarks/bench_results.py's run record; its note gives the loss of the
first step and of the last). Exit status: 0 measured, 3 out of memory (the record says "does
not fit": try a smaller --micro-batch), 1 any other failure, 2 a bad argument.

Two switches check the script itself, not part of the benchmark: --device cpu (FSDP2 over gloo,
autocast on the CPU, no peak memory; tests/bench/gpt2_torch_test.sh) and --no-compile (eager,
the systems pytorch-eager and pytorch-fsdp2-eager).
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_common  # noqa: E402
import bench_results  # noqa: E402

PROG = "gpt2_torch.py"

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    bench_common.fail(PROG, f"PyTorch is not installed for {sys.executable}", code=1)


class Attention(nn.Module):
    def __init__(self, n_head, c):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_head, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = Attention(n_head, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    """Hugging Face GPT-2's module names (wte, wpe, h.N, ln_f), as shardtrain's tensors."""

    def __init__(self, model, seq_len):
        super().__init__()
        n_layer, n_head, c = bench_common.shape(model)
        self.vocab = bench_common.padded_vocab()
        self.wte = nn.Embedding(self.vocab, c)
        self.wpe = nn.Embedding(seq_len, c)
        self.h = nn.ModuleList(Block(n_head, c) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.lm_head = nn.Linear(c, self.vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


def adamw(model):
    """Fused AdamW, decay on tensors of rank >= 2 only (as shardtrain)."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)


def fsdp2_api():
    """fully_shard and MixedPrecisionPolicy: public since PyTorch 2.6, _composable before."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def prepare(args, device):
    """The model on the device, compiled (and sharded with --fsdp2), and its optimizer."""
    torch.manual_seed(args.seed)
    model = Gpt2(args.model, args.seq_len).to(device)
    if not args.fsdp2:
        return (model if args.no_compile else torch.compile(model)), None, adamw(model)
    from torch.distributed.device_mesh import init_device_mesh
    fully_shard, MixedPrecisionPolicy = fsdp2_api()
    if device.type == "cuda":
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=device)
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh(device.type, (1,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for block in model.h:
        if not args.no_compile:
            block.compile()
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model, model, adamw(model)


def measure(args, device):
    """tokens/s of the timed steps, and the loss of the first step and of the last."""
    accum = args.batch_tokens // (args.micro_batch * args.seq_len)
    model, sharded, optimizer = prepare(args, device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    tokens = torch.randint(0, bench_common.VOCAB, (accum, args.micro_batch, args.seq_len + 1),
                           device=device, generator=gen)
    inputs, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()

    def step():
        for i in range(accum):
            if sharded is not None:
                sharded.set_requires_gradient_sync(i == accum - 1)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(inputs[i], targets[i])
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    first_loss = float(step().item())
    for _ in range(args.warmup - 1):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    synchronize()
    seconds = time.perf_counter() - start
    return args.steps * args.batch_tokens / seconds, first_loss, float(loss.item())


def parse_args(argv):
    parser = bench_common.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, choices=list(bench_common.SHAPES))
    parser.add_argument("--seq-len", type=int, default=bench_common.POSITIONS)
    parser.add_argument("--batch-tokens", type=int, default=524288,
                        help="tokens per optimizer step (micro-batch x seq-len x grad-accum)")
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=3, help="timed steps")
    parser.add_argument("--fsdp2", action="store_true", help="fully_shard at world 1")
    parser.add_argument("--no-compile", action="store_true",
                        help="eager PyTorch (system pytorch-eager, pytorch-fsdp2-eager)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu checks the script itself (FSDP2 over gloo, no peak memory)")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)
    if not 1 <= args.seq_len <= bench_common.POSITIONS:
        parser.error(f"--seq-len {args.seq_len}: must be in [1, {bench_common.POSITIONS}]")
    if args.micro_batch < 1 or args.batch_tokens % (args.micro_batch * args.seq_len):
        parser.error(f"--batch-tokens {args.batch_tokens} is not a multiple of --micro-batch "
                     f"{args.micro_batch} x --seq-len {args.seq_len}")
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1 (the first step compiles)")
    return args


def system_name(args):
    name = "pytorch-fsdp2" if args.fsdp2 else "pytorch-compile"
    if args.no_compile:
        name = "pytorch-fsdp2-eager" if args.fsdp2 else "pytorch-eager"
    return name


def main(argv):
    args = parse_args(argv)
    system = system_name(args)
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    fields = dict(system=system, model=args.model, seq_len=args.seq_len,
                  micro_batch=args.micro_batch,
                  grad_accum=args.batch_tokens // (args.micro_batch * args.seq_len),
                  version=f"torch {torch.__version__}")
    code = 0
    try:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device usable by PyTorch")
        torch.set_float32_matmul_precision("high")
        tokens_per_s, first_loss, loss = measure(args, device)
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        if math.isfinite(loss):
            rec = bench_results.record(status="ok", tokens_per_s=tokens_per_s,
                                       peak_mem_bytes=peak, note=f"{args.steps} timed steps "
                                       f"after {args.warmup} warm-up, loss {first_loss:.3f} at "
                                       f"the first step, {loss:.3f} at the last", **fields)
            mfu = 100 * bench_common.mfu(tokens_per_s, args.model, args.seq_len)
            gpu = f", MFU {mfu:.1f}%, peak {peak / 2**30:.2f} GiB" if peak is not None else ""
            print(f"{PROG}: {args.model} {system} on {args.device}: {tokens_per_s:.0f} tokens/s"
                  f"{gpu}, torch {torch.__version__}")
        else:
            rec = bench_results.record(status="failed", note=f"loss {loss}", **fields)
            code = 1
    except Exception as e:  # noqa: BLE001 - every failure becomes the run's record
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        fits = not isinstance(e, torch.cuda.OutOfMemoryError) and "out of memory" not in str(e)
        rec = bench_results.record(status="failed" if fits else "does not fit",
                                   note=f"{type(e).__name__}: {first}", **fields)
        code = 1 if fits else 3
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    print(bench_results.result_line(rec), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
