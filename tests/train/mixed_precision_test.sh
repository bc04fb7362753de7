#!/usr/bin/env bash
# bf16 parameters and bf16 gradient reductions (--param-dtype bf16 --reduce-dtype bf16) train
# the tiny GPT like fp32 does, and keep the sharding guarantees. Each mesh (one rank, dp-shard 2,
# hybrid 2x2, tp 2 x dp-shard 2) trains once in fp32 and at stages 0-3 in bf16 (one rank: once);
# the mixed policies (bf16 params with fp32 reduce, fp32 params with bf16 reduce) train on
# dp-shard 2. Checked:
#   - every metrics line's "dtypes" names the policy the run asked for;
#   - each bf16 run is close to the fp32 run ON THE SAME MESH, so that cross-mesh rounding does
#     not blur the comparison, and it differs from it by more than fp32 rounding does, so a run
#     whose dtype flags were ignored fails. The bounds, from the values measured when this test
#     was written (OpenBLAS, one thread), worst over all runs:
#       quantity (relative)           bf16 bound  measured  | floor  measured  | fp32 rounding
#       loss, per step                1e-3        3.2e-4    | 3e-5   3.0e-4 *  | 1.1e-7
#       grad norm, per step           5e-3        1.7e-3    | 2e-5   1.9e-4    | 8.5e-8
#       exported tensor (Frobenius)   3e-2        9.4e-3    | 1e-3   3.6e-3    | 5.6e-5
#     "floor": the largest difference over the steps (tensors) must reach it; "measured" there
#     is the smallest such largest difference over the runs (* runs with bf16 parameters only:
#     fp32 parameters with bf16 reduce changed the loss by 3.4e-6 at most). "fp32 rounding": the
#     fp32 runs of the meshes against the single-rank one, checked here to stay 10x below each
#     floor so that the floors keep meaning "beyond rounding";
#   - at equal mesh, stages 0-3 give bit-identical losses and exports in bf16 too: every stage
#     sums the same bf16 gradients in the same order.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

bf16=(--param-dtype bf16 --reduce-dtype bf16)
pairs=() # "RUN FP32_RUN_ON_ITS_MESH PARAM_DTYPE REDUCE_DTYPE"
# name, ranks, micro-batch (global batch 12 = micro x R x S), then the mesh flags
meshes=("one 1 12" "s2 2 6 --dp-shard 2" "r2s2 4 3 --dp-replicate 2 --dp-shard 2"
        "tp2s2 4 6 --tp 2 --dp-shard 2")
for m in "${meshes[@]}"; do
  read -r mesh ranks micro flags <<<"$m"
  stages=(0 1 2 3)
  [ "$ranks" -eq 1 ] && stages=(0)
  # shellcheck disable=SC2086 # the mesh flags are words on purpose
  run "${mesh}_fp32" "$ranks" $flags --micro-batch "$micro"
  for z in "${stages[@]}"; do
    # shellcheck disable=SC2086
    run "${mesh}_z$z" "$ranks" $flags --micro-batch "$micro" --zero "$z" "${bf16[@]}"
    pairs+=("${mesh}_z$z ${mesh}_fp32 bf16 bf16")
  done
done
run mixedp_s2_z3 2 --dp-shard 2 --micro-batch 6 --zero 3 --param-dtype bf16
run mixedg_s2_z2 2 --dp-shard 2 --micro-batch 6 --zero 2 --reduce-dtype bf16
pairs+=("mixedp_s2_z3 s2_fp32 bf16 fp32" "mixedg_s2_z2 s2_fp32 fp32 bf16")

PYTHONPATH="$(dirname "$0")" python3 - "$work" "${pairs[@]}" <<'PY'
import os, sys
from run_outputs import compare_exports, metrics, same_export, tensors
work, pairs = sys.argv[1], [p.split() for p in sys.argv[2:]]
# Upper bounds (close to fp32) and floors (beyond fp32 rounding); see the table above.
CLOSE = {"loss": 1e-3, "grad_norm": 5e-3, "export": 3e-2}
FLOOR = {"loss": 3e-5, "grad_norm": 2e-5, "export": 1e-3}
fail = []

def rel(a, b):
    return abs(a - b) / abs(b)

def export_diffs(run, ref):
    diffs, problems = compare_exports(tensors(os.path.join(work, run + ".safetensors")),
                                      tensors(os.path.join(work, ref + ".safetensors")))
    fail.extend(f"{run}: exported {p}" for p in problems)
    return diffs

def check_dtypes(run, param, reduce):
    rows = metrics(work, run)
    bad = [r for r in rows if r["dtypes"] != {"param": param, "reduce": reduce}]
    if bad:
        fail.append(f"{run}: dtypes {bad[0]['dtypes']} at step {bad[0]['step']} ({len(bad)} of "
                    f"{len(rows)} lines), asked for param {param}, reduce {reduce}")

worst = {k: 0.0 for k in CLOSE}  # largest difference of any bf16 run
least = {k: float("inf") for k in FLOOR}  # smallest largest-difference of a run
for run, ref, param, reduce in pairs:
    check_dtypes(run, param, reduce)
    check_dtypes(ref, "fp32", "fp32")
    rows, ref_rows = metrics(work, run), metrics(work, ref)
    if len(rows) != len(ref_rows):
        fail.append(f"{run}: {len(rows)} steps, {ref} has {len(ref_rows)}"); continue
    largest = {}
    for key in ("loss", "grad_norm"):
        d = [rel(a[key], b[key]) for a, b in zip(rows, ref_rows)]
        for r, x in zip(rows, d):
            if x > CLOSE[key]:
                fail.append(f"{run} step {r['step']}: {key} differs from {ref} by {x:.2e} "
                            f"> {CLOSE[key]:.0e}")
        largest[key] = max(d)
    diffs = export_diffs(run, ref)
    for name, x in diffs.items():
        if x > CLOSE["export"]:
            fail.append(f"{run}: exported {name} differs from {ref} by {x:.2e} "
                        f"> {CLOSE['export']:.0e}")
    largest["export"] = max(diffs.values(), default=0.0)
    for key, x in largest.items():
        worst[key] = max(worst[key], x)
        if key == "loss" and param == "fp32":
            continue  # bf16 gradients alone move the loss by rounding-sized amounts
        least[key] = min(least[key], x)
        if x < FLOOR[key]:
            fail.append(f"{run}: {key} differs from {ref} by at most {x:.2e} < {FLOOR[key]:.0e}, "
                        f"no more than fp32 rounding; were the dtype flags ignored?")
    print(f"{run} ({param} params, {reduce} reduce) against {ref}: largest difference in loss "
          f"{largest['loss']:.2e}, grad norm {largest['grad_norm']:.2e}, "
          f"exported tensor {largest['export']:.2e}")
print("bf16 against fp32 on the same mesh, worst: " +
      ", ".join(f"{k} {v:.2e} (bound {CLOSE[k]:.0e})" for k, v in worst.items()))
print("smallest difference from fp32 of a run: " +
      ", ".join(f"{k} {v:.2e} (floor {FLOOR[k]:.0e})" for k, v in least.items()))

# fp32 rounding: the same training on other meshes, in fp32, against one rank.
one = metrics(work, "one_fp32")
noise = {k: 0.0 for k in FLOOR}
for mesh in ("s2", "r2s2", "tp2s2"):
    rows = metrics(work, mesh + "_fp32")
    for key in ("loss", "grad_norm"):
        noise[key] = max([noise[key]] + [rel(a[key], b[key]) for a, b in zip(rows, one)])
    diffs = export_diffs(mesh + "_fp32", "one_fp32")
    noise["export"] = max([noise["export"]] + list(diffs.values()))
for key, x in noise.items():
    if x > FLOOR[key] / 10:
        fail.append(f"fp32 rounding across meshes reaches {x:.2e} in {key}, not 10x below the "
                    f"floor {FLOOR[key]:.0e}: the floor no longer separates bf16 from rounding")
print("fp32 rounding across meshes: " + ", ".join(f"{k} {v:.2e}" for k, v in noise.items()))

groups = {}
for run, _, _, _ in pairs:
    if not run.startswith("mixed"):
        groups.setdefault(run.split("_")[0], []).append(run)
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
