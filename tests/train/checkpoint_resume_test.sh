#!/usr/bin/env bash
# Resuming from a checkpoint continues the run that was stopped. The tiny GPT trains 6 steps on
# a global batch of 8 sequences; a second run trains the first 3 and checkpoints there (the
# warm-up is 3 steps, so the two schedules agree on those steps). Checked:
#   - same mesh, stage and dtypes (1 rank; dp-shard 2 ZeRO-3; tp 2 x dp-shard 2 ZeRO-2 with
#     --grad-accum 2; dp-shard 2 ZeRO-1 with bf16 params and reductions): --resume continues
#     from step_3 (its log says so), the metrics lines of steps 3..5 carry the very same loss,
#     grad_norm and lr text as the run that never stopped, and the exports are byte-identical;
#   - another mesh, stage or param dtype (S, T, R and ZeRO stage all changed, fp32 <-> bf16;
#     sources of 1, 2 and 4 files, with replicas, tp 4, whose wte has more padding rows, and
#     dp-shard 3, whose units pad to a multiple of 48 elements where dp-shard 2's pad to 32):
#     the parameters the resumed run starts from (--save-init, the fp32 masters) are
#     byte-identical to the saving run's export at step 3, and its losses and grad norms follow
#     the run that never stopped on the TARGET mesh: to 1e-5 relative in fp32; where the first
#     3 steps ran in the other dtype, to the tolerance measured for it (printed; see BF16_TOL);
#   - a run resumed on half the global batch counts the tokens trained on from the checkpoint's.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"
common=(train --model tiny --data-train "$work/data/bytes_train_*.bin" --steps 6 --lr 3e-3
        --warmup 3 --min-lr 3e-4 --seed 7)
K=3

# stopped NAME RANKS ARGS...: NAME_full trains 6 steps; NAME_part trains K and checkpoints
# into $work/ck_NAME; NAME_res resumes there with --resume and trains to step 6.
stopped() {
  local name=$1 ranks=$2
  shift 2
  run "${name}_full" "$ranks" "$@"
  run "${name}_part" "$ranks" "$@" --steps $K --ckpt-dir "$work/ck_$name"
  run "${name}_res" "$ranks" "$@" --ckpt-dir "$work/ck_$name" --resume
}

# resumed NAME SOURCE RANKS ARGS...: NAME trains from SOURCE's step-K checkpoint to step 6,
# exporting the parameters it starts from as NAME.init.safetensors.
resumed() {
  local name=$1 source=$2 ranks=$3
  shift 3
  run "$name" "$ranks" "$@" --resume-from "$work/ck_$source/step_$K" \
    --save-init "$work/$name.init.safetensors"
}

bf16=(--param-dtype bf16 --reduce-dtype bf16)
stopped one 1 --micro-batch 8
stopped s2z3 2 --dp-shard 2 --zero 3 --micro-batch 4
stopped tp2s2z2 4 --tp 2 --dp-shard 2 --zero 2 --micro-batch 2 --grad-accum 2
stopped s2z1bf 2 --dp-shard 2 --zero 1 --micro-batch 4 "${bf16[@]}"

# Never-stopped runs on the other targets, and a tp-split source.
run tp2s2z1_full 4 --tp 2 --dp-shard 2 --zero 1 --micro-batch 4
run r2s2z2_full 4 --dp-replicate 2 --dp-shard 2 --zero 2 --micro-batch 2
run s4z3_full 4 --dp-shard 4 --zero 3 --micro-batch 2
run tp4_full 4 --tp 4 --micro-batch 8
run tp2z0_part 2 --tp 2 --zero 0 --micro-batch 8 --steps $K --ckpt-dir "$work/ck_tp2z0"
run r2s2z2_part 4 --dp-replicate 2 --dp-shard 2 --zero 2 --micro-batch 2 --steps $K \
  --ckpt-dir "$work/ck_r2s2z2"
# An uneven shard count: ZeRO-3 on dp-shard 2 resumed on dp-shard 3, a global batch of 6.
run s2z3b6_part 2 --dp-shard 2 --zero 3 --micro-batch 3 --steps $K --ckpt-dir "$work/ck_s2z3b6"
run s3z3_full 3 --dp-shard 3 --zero 3 --micro-batch 2

# target run, source, target mesh
resumed s2z3_to_one s2z3 1 --micro-batch 8
resumed s2z3_to_tp2s2z1 s2z3 4 --tp 2 --dp-shard 2 --zero 1 --micro-batch 4
resumed s2z3_to_r2s2z2 s2z3 4 --dp-replicate 2 --dp-shard 2 --zero 2 --micro-batch 2
resumed tp2z0_to_s4z3 tp2z0 4 --dp-shard 4 --zero 3 --micro-batch 2
resumed tp2s2z2_to_tp4 tp2s2z2 4 --tp 4 --micro-batch 8
resumed r2s2z2_to_one r2s2z2 1 --micro-batch 8
resumed s2z3_to_s2z1bf s2z3 2 --dp-shard 2 --zero 1 --micro-batch 4 "${bf16[@]}"
resumed s2z1bf_to_one s2z1bf 1 --micro-batch 8
resumed s2z3b6_to_s3z3 s2z3b6 3 --dp-shard 3 --zero 3 --micro-batch 2
# Half the global batch from step K on: the tokens trained on go on from the checkpoint's count.
# Its checkpoint at step 6 records them, not 6 steps of its own batch.
run one_half_batch 1 --micro-batch 4 --resume-from "$work/ck_one/step_$K" --ckpt-dir "$work/ck_half"
"$shardtrain" inspect "$work/ck_half/step_6" > "$work/inspect_half.txt" 2>&1

PYTHONPATH="$(dirname "$0")" python3 - "$work" "$K" <<'PY'
import filecmp, os, re, sys
from run_outputs import metrics
work, K = sys.argv[1], int(sys.argv[2])
fail = []
# Where the dtype changes at step K the resumed run's first K steps ran in the other dtype, so
# it cannot follow the reference bit for bit. Measured (worst relative loss or grad-norm
# difference over steps 3..5, x86-64 OpenBLAS, several runs): fp32 -> bf16 target 2.0e-4 to
# 2.1e-4, bf16 -> fp32 target 6.3e-5 (the fp32 cases: at most 1.0e-7). The bound leaves 5x
# margin over the larger and is 20x below the 2% that mixed_precision_test allows bf16
# against fp32; a wrong piece or a lost Adam moment is off by 1e-2 or more.
BF16_TOL = 1e-3

def raw_lines(name):
    """Each metrics line's step, loss, grad_norm and lr exactly as written."""
    out = []
    with open(os.path.join(work, name + ".jsonl")) as f:
        for line in f:
            out.append(tuple(re.search(r'"%s": ([^,}]+)' % k, line).group(1)
                             for k in ("step", "loss", "grad_norm", "lr")))
    return out

def same_file(a, b):
    return filecmp.cmp(os.path.join(work, a), os.path.join(work, b), shallow=False)

def log_says(name, text):
    with open(os.path.join(work, name + ".log")) as f:
        return text in f.read()

# Same mesh: bitwise.
for case in ("one", "s2z3", "tp2s2z2", "s2z1bf"):
    full, part, res = (raw_lines(case + s) for s in ("_full", "_part", "_res"))
    if part != full[:K]:
        fail.append(f"{case}: the {K}-step run's metrics differ from the first {K} steps")
    if res != full[K:]:
        fail.append(f"{case}: resumed metrics {res} differ from the never-stopped {full[K:]}")
    if not same_file(case + "_res.safetensors", case + "_full.safetensors"):
        fail.append(f"{case}: the resumed run's export differs from the never-stopped run's")
    if not log_says(case + "_res", f"resumed from {work}/ck_{case}/step_{K}: step {K}"):
        fail.append(f"{case}: --resume did not log 'resumed from .../ck_{case}/step_{K}'")
    print(f"{case}: steps {K}..5 and export bit-identical after resume")

# Across meshes and dtypes.
cases = [  # resumed run, source, never-stopped reference on the target, tolerance
    ("s2z3_to_one", "s2z3", "one_full", 1e-5),
    ("s2z3_to_tp2s2z1", "s2z3", "tp2s2z1_full", 1e-5),
    ("s2z3_to_r2s2z2", "s2z3", "r2s2z2_full", 1e-5),
    ("tp2z0_to_s4z3", "tp2z0", "s4z3_full", 1e-5),
    ("tp2s2z2_to_tp4", "tp2s2z2", "tp4_full", 1e-5),
    ("r2s2z2_to_one", "r2s2z2", "one_full", 1e-5),
    ("s2z3_to_s2z1bf", "s2z3", "s2z1bf_full", BF16_TOL),
    ("s2z1bf_to_one", "s2z1bf", "one_full", BF16_TOL),
    ("s2z3b6_to_s3z3", "s2z3b6", "s3z3_full", 1e-5),
]
for name, source, ref, tol in cases:
    if not same_file(name + ".init.safetensors", source + "_part.safetensors"):
        fail.append(f"{name}: the restored parameters differ from {source}'s at step {K}")
    if not log_says(name, f"resumed from {work}/ck_{source}/step_{K}: step {K}"):
        fail.append(f"{name}: no 'resumed from' line naming ck_{source}/step_{K}")
    got, want = metrics(work, name), metrics(work, ref)[K:]
    if [r["step"] for r in got] != [r["step"] for r in want]:
        fail.append(f"{name}: steps {[r['step'] for r in got]}, expected {K}..5"); continue
    worst = 0.0
    for a, b in zip(got, want):
        if a["lr"] != b["lr"]:
            fail.append(f"{name} step {a['step']}: lr {a['lr']} vs {b['lr']}")
        for key in ("loss", "grad_norm"):
            rel = abs(a[key] - b[key]) / abs(b[key])
            worst = max(worst, rel)
            if rel > tol:
                fail.append(f"{name} step {a['step']} {key} {a[key]!r} vs {ref} {b[key]!r}")
    print(f"{name}: restored state byte-identical; against {ref}: worst relative "
          f"difference {worst:.2e} (bound {tol:g})")
# tiny's sequences are 64 tokens: K steps of 8 sequences, then steps of 4.
tokens = [r["tokens"] for r in metrics(work, "one_half_batch")]
if tokens != [K * 8 * 64 + (i + 1) * 4 * 64 for i in range(6 - K)]:
    fail.append(f"one_half_batch: tokens {tokens} do not go on from {K} steps of 8 x 64")
with open(os.path.join(work, "inspect_half.txt")) as f:
    step_line = f"step        6 ({K * 8 * 64 + (6 - K) * 4 * 64} tokens trained on)"
    if step_line not in f.read():
        fail.append(f"inspect ck_half/step_6 lacks '{step_line}'")
for f in fail: print("FAIL:", f)
print("checkpoint_resume_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
