#!/usr/bin/env bash
# bf16 parameters and bf16 gradient reductions (--param-dtype bf16 --reduce-dtype bf16) train
# the tiny GPT like fp32 does, and keep the sharding guarantees. Checked:
#   - at equal mesh, stages 0-3 give bit-identical losses and exports in bf16 too (dp-shard 2,
#     hybrid 2x2, tp 2 x dp-shard 2): every stage sums the same bf16 gradients in the same order;
#   - every bf16 run's losses stay within 2% of the fp32 single-rank run's, step by step, and
#     its exported fp32 master weights within 2% (Frobenius, per tensor) of the fp32 export;
#     the differences must also be real: a run whose bf16 flags were ignored would equal fp32;
#   - the mixed policies (bf16 params with fp32 reduce, fp32 params with bf16 reduce) train too.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

bf16=(--param-dtype bf16 --reduce-dtype bf16)
run fp32 1 --micro-batch 12
run one 1 --micro-batch 12 "${bf16[@]}"
names=(one)
meshes=("s2 2 6 --dp-shard 2" "r2s2 4 3 --dp-replicate 2 --dp-shard 2"
        "tp2s2 4 6 --tp 2 --dp-shard 2")
for m in "${meshes[@]}"; do
  read -r mesh ranks micro flags <<<"$m"
  for z in 0 1 2 3; do
    # shellcheck disable=SC2086 # the mesh flags are words on purpose
    run "${mesh}_z$z" "$ranks" $flags --micro-batch "$micro" --zero "$z" "${bf16[@]}"
    names+=("${mesh}_z$z")
  done
done
run mixedp_s2_z3 2 --dp-shard 2 --micro-batch 6 --zero 3 --param-dtype bf16
run mixedg_s2_z2 2 --dp-shard 2 --micro-batch 6 --zero 2 --reduce-dtype bf16
names+=(mixedp_s2_z3 mixedg_s2_z2)

PYTHONPATH="$(dirname "$0")" python3 - "$work" "${names[@]}" <<'PY'
import os, sys
from run_outputs import metrics, relative_frobenius, same_export, tensors
work, names = sys.argv[1], sys.argv[2:]
fail = []
ref = metrics(work, "fp32")
ref_params = tensors(os.path.join(work, "fp32.safetensors"))
worst_loss = worst_param = 0.0
for n in names:
    rows = metrics(work, n)
    if len(rows) != len(ref):
        fail.append(f"{n}: {len(rows)} steps"); continue
    for a, b in zip(rows, ref):
        rel = abs(a["loss"] - b["loss"]) / abs(b["loss"])
        worst_loss = max(worst_loss, rel)
        if rel > 0.02:
            fail.append(f"{n} step {a['step']}: loss {a['loss']} vs fp32 {b['loss']}")
    if [r["loss"] for r in rows] == [r["loss"] for r in ref]:
        fail.append(f"{n}: losses equal fp32's bit for bit; the dtype flags had no effect")
    got = tensors(os.path.join(work, n + ".safetensors"))
    for name, want in ref_params.items():
        rel = relative_frobenius(got[name], want)
        worst_param = max(worst_param, rel)
        if rel > 0.02:
            fail.append(f"{n}: exported {name} differs from fp32 by {rel:.2e}")
print(f"bf16 against fp32: worst loss difference {worst_loss:.2e}, "
      f"worst exported tensor {worst_param:.2e}")
groups = {}
for n in names:
    if "_z" in n and not n.startswith("mixed"):
        groups.setdefault(n.split("_")[0], []).append(n)
compared = 0
for mesh, members in groups.items():
    for other in members[1:]:
        compared += 1
        la = [r["loss"] for r in metrics(work, members[0])]
        lb = [r["loss"] for r in metrics(work, other)]
        if la != lb:
            fail.append(f"{other} losses differ from {members[0]}: {lb} vs {la}")
        if not same_export(work, members[0], other):
            fail.append(f"{other} exported parameters differ from {members[0]}")
print(f"{compared} bitwise comparisons across stages in bf16")
for f in fail: print("FAIL:", f)
print("mixed_precision_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
