#!/usr/bin/env bash
# Activation recompute (--recompute gelu|block) computes the same step as keeping every
# activation (--recompute none). The tiny GPT with 3 blocks (so that a middle block recomputes
# between two others) trains 10 steps on a global batch of 12 sequences,
# validating every 5 steps, in each mode, on one rank, on dp-shard 2 at ZeRO stages 0-3, on tp 2
# (whose recomputed block forward repeats its attention all-reduce), with 2 micro-batches per
# step at ZeRO-3, and with bf16 parameters and gradients at ZeRO-3. Checked against the `none`
# run of the same mesh and flags:
#   - training and validation losses, grad norms and the exported parameters are bit-identical
#     (the CPU computes in fp32 at every param dtype: recomputing runs the same kernels on the
#     same inputs, and the opening LayerNorm of a recomputed block normalises the stored
#     residual sum exactly as the fused add-and-norm of the forward did);
#   - the mode took effect: the activations the allocator measured shrink from none to gelu
#     to block, and the tp 2 block run's all-reduce bytes exceed its none run's by one
#     B x T x C fp32 all-reduce per block but the last, per step.
# And across meshes: the fp32 `none` runs on dp-shard 2 (ZeRO 0-3), tp 2 and with 2
# micro-batches per step, whose global batch is the one-rank run's, validate to one rank's
# val_loss within 1e-5 relative: an evaluation batch is the global batch, grad-accum included
# (it was micro-batch x dp ranks, so the run with 2 micro-batches validated on half the data).
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

extra=(--n-layer 3 --data-val "$work/data/bytes_val_*.bin" --eval-every 5 --eval-batches 2)
# name, ranks, then the flags (global batch 12 = micro x R x S x grad-accum)
configs=("one 1 --micro-batch 12"
         "s2z0 2 --dp-shard 2 --micro-batch 6 --zero 0"
         "s2z1 2 --dp-shard 2 --micro-batch 6 --zero 1"
         "s2z2 2 --dp-shard 2 --micro-batch 6 --zero 2"
         "s2z3 2 --dp-shard 2 --micro-batch 6 --zero 3"
         "tp2 2 --tp 2 --micro-batch 12"
         "s2z3accum 2 --dp-shard 2 --micro-batch 3 --grad-accum 2 --zero 3"
         "s2z3bf16 2 --dp-shard 2 --micro-batch 6 --zero 3 --param-dtype bf16 --reduce-dtype bf16")
names=()
for c in "${configs[@]}"; do
  read -r name ranks flags <<<"$c"
  for mode in none gelu block; do
    # shellcheck disable=SC2086 # the flags are words on purpose
    run "${name}_$mode" "$ranks" $flags "${extra[@]}" --recompute "$mode"
  done
  names+=("$name")
done

PYTHONPATH="$(dirname "$0")" python3 - "$work" "${names[@]}" <<'PY'
import sys
from run_outputs import metrics, same_export
work, names = sys.argv[1], sys.argv[2:]
fail = []
B_T_C, LAYERS = 12 * 64 * 64, 3  # tp 2 runs: micro-batch 12 x 64 tokens x width 64
for name in names:
    base = metrics(work, f"{name}_none")
    if len(base) != 10 or sum("val_loss" in r for r in base) != 2:
        fail.append(f"{name}_none: {len(base)} steps, {sum('val_loss' in r for r in base)} evaluations")
    acts = {"none": base[-1]["mem"]["activations"]}
    for mode in ("gelu", "block"):
        run = f"{name}_{mode}"
        rows = metrics(work, run)
        for key in ("loss", "grad_norm", "val_loss"):
            got, want = [r.get(key) for r in rows], [r.get(key) for r in base]
            if got != want:
                fail.append(f"{run}: {key} {got} differs from none's {want}")
        if not same_export(work, f"{name}_none", run):
            fail.append(f"{run}: exported parameters differ from none's")
        acts[mode] = rows[-1]["mem"]["activations"]
    if not acts["none"] > acts["gelu"] > acts["block"]:
        fail.append(f"{name}: activations none {acts['none']}, gelu {acts['gelu']}, "
                    f"block {acts['block']} bytes do not shrink")
    print(f"{name}: bit-identical in every mode; activations none {acts['none']}, "
          f"gelu {acts['gelu']}, block {acts['block']} bytes")
# Across meshes: the fp32 runs with one rank's global batch (not bf16's) train the same model and
# validate it on the same batches, the fp32 sums in another order (measured: within 1e-7
# relative of one rank's val_loss).
want = [(r["step"], r["val_loss"]) for r in metrics(work, "one_none") if "val_loss" in r]
for name in ("s2z0", "s2z1", "s2z2", "s2z3", "tp2", "s2z3accum"):
    got = [(r["step"], r["val_loss"]) for r in metrics(work, f"{name}_none") if "val_loss" in r]
    worst = max((abs(g[1] - w[1]) / abs(w[1]) for g, w in zip(got, want)), default=0.0)
    if [g[0] for g in got] != [w[0] for w in want] or worst > 1e-5:
        fail.append(f"{name}_none: val_loss {got} differs from one rank's {want} (bound 1e-5)")
    else:
        print(f"{name}_none: val_loss within {worst:.1e} of one rank's")
# tp 2, ring all-reduce over 2 ranks: each rank sends half the fp32 buffer, twice.
want = (LAYERS - 1) * B_T_C * 4
extra = metrics(work, "tp2_block")[0]["comm_bytes"]["all_reduce"] - \
        metrics(work, "tp2_none")[0]["comm_bytes"]["all_reduce"]
if extra != want:
    fail.append(f"tp2: block recompute sent {extra} more all-reduce bytes in step 0, want {want}")
for f in fail: print("FAIL:", f)
print("recompute_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
