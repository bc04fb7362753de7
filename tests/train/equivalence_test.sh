#!/usr/bin/env bash
# The sharded engine computes what one rank computes. The tiny GPT trains 10 steps on a fixed
# global batch of 12 sequences, on one rank and on every data-parallel mesh below, at every
# ZeRO stage. Checked on every run:
#   - the loss and global grad norm of each step match the single-rank run to 1e-5 relative;
#   - at equal mesh, stages 0-3 (and prefetch / reshard variants) give bit-identical losses
#     and bit-identical exported parameters;
#   - every metrics line counts the tokens of the global batches trained so far (12 x 64 each);
#   - every mesh's export (TP slices gathered, shards gathered) matches the single-rank export
#     to 1e-4 per tensor in the Frobenius norm (not the max-norm: Adam turns rounding noise on
#     near-zero gradients into 1e-4-sized differences of single elements, see
#     tests/golden/README.md; a misplaced slice would differ by O(1)), and importing an export
#     and exporting it again gives the same bytes.
# Meshes: dp-shard 2, 4 and 3 (padding), hybrid 2x2, tp 2, tp 2 x dp-shard 2, and
# tp 2 x hybrid 2x2 (8 ranks). Gradient accumulation (2 micro-batches of half the size) must
# match too, also where a shard ends: the data (one file of the fortunes corpus) is cut into
# shards of 1921 tokens, which hold 30 sequences of 64 + 1, so every third global batch of 12
# sequences spans two shards (dp-shard 3's rank 1 reads a micro-batch from both), and a loader
# that placed each micro-batch by itself (5 of 384 tokens fit a shard) would read other tokens
# when accumulating.
# Under the sanitizers (ST_TEST_SANITIZED, .bazelrc) stages 0 and 3 only: what stages 1 and 2
# change, lazy_step_test and the sharding unit tests run there.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
train_data_flags="/usr/share/games/fortunes/computers --shard-tokens 1921"
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

run ref 1 --micro-batch 12
run ref_accum 1 --micro-batch 6 --grad-accum 2
# name, ranks, micro-batch (global batch 12 = micro x R x S), then the mesh flags
meshes=("s2 2 6 --dp-shard 2" "s4 4 3 --dp-shard 4" "s3 3 4 --dp-shard 3"
        "r2s2 4 3 --dp-replicate 2 --dp-shard 2" "tp2 2 12 --tp 2" "tp2s2 4 6 --tp 2 --dp-shard 2"
        "tp2r2s2 8 3 --tp 2 --dp-replicate 2 --dp-shard 2")
stages=(0 1 2 3)
[ -z "${ST_TEST_SANITIZED:-}" ] || stages=(0 3)
names=()
for m in "${meshes[@]}"; do
  read -r mesh ranks micro flags <<<"$m"
  for z in "${stages[@]}"; do
    # shellcheck disable=SC2086 # the mesh flags are words on purpose
    run "${mesh}_z$z" "$ranks" $flags --micro-batch "$micro" --zero "$z"
    names+=("${mesh}_z$z")
  done
done
run s4_z3_prefetch2 4 --dp-shard 4 --micro-batch 3 --zero 3 --prefetch 2
run s4_z3_keep 4 --dp-shard 4 --micro-batch 3 --zero 3 --reshard-after-forward=false
run s2_z3_accum 2 --dp-shard 2 --micro-batch 3 --grad-accum 2 --zero 3
names+=(s4_z3_prefetch2 s4_z3_keep s2_z3_accum ref_accum)
# Round trip: import the tp2 x 2x2 stage-3 export on one rank and export it unchanged.
"$mpirun_sh" 1 "$shardtrain" train --model tiny --steps 0 --init-from "$work/tp2r2s2_z3.safetensors" \
  --export "$work/roundtrip.safetensors" > "$work/roundtrip.log" 2>&1 \
  || { echo "FAIL: round trip"; cat "$work/roundtrip.log"; exit 1; }

PYTHONPATH="$(dirname "$0")" python3 - "$work" "${names[@]}" <<'PY'
import os, sys
from run_outputs import compare_exports, metrics, same_export, tensors, tokens_problems
work, names = sys.argv[1], sys.argv[2:]
ref = metrics(work, "ref")
fail = []
for n in ["ref"] + names:
    # Every run trains on global batches of 12 sequences of the tiny GPT's 64 tokens.
    fail += [f"{n}: {p}" for p in tokens_problems(metrics(work, n), 12 * 64)]
for n in names:
    rows = metrics(work, n)
    if len(rows) != len(ref):
        fail.append(f"{n}: {len(rows)} steps"); continue
    for a, b in zip(rows, ref):
        for key in ("loss", "grad_norm"):
            if abs(a[key] - b[key]) > 1e-5 * abs(b[key]):
                fail.append(f"{n} step {a['step']} {key} {a[key]!r} vs single rank {b[key]!r}")
# Bit-identical across stages (and scheduling variants) at equal mesh.
groups = {}
for n in names:
    if n.startswith("ref"): continue
    mesh = n.split("_")[0] + ("_accum" if n.endswith("accum") else "")
    groups.setdefault(mesh, []).append(n)
for mesh, members in groups.items():
    base = members[0]
    for other in members[1:]:
        la = [r["loss"] for r in metrics(work, base)]; lb = [r["loss"] for r in metrics(work, other)]
        if la != lb:
            fail.append(f"{other} losses differ from {base}: {lb} vs {la}")
        if not same_export(work, base, other):
            fail.append(f"{other} exported parameters differ from {base}")
ref_params = tensors(os.path.join(work, "ref.safetensors"))
worst = 0.0
for n in names:
    diffs, problems = compare_exports(tensors(os.path.join(work, n + ".safetensors")), ref_params)
    fail += [f"{n}: exported {p}" for p in problems]
    for name, rel in diffs.items():
        worst = max(worst, rel)
        if rel > 1e-4:
            fail.append(f"{n}: exported {name} differs from one rank by {rel:.2e}")
print(f"exports against one rank: worst relative difference {worst:.2e}")
if not same_export(work, "tp2r2s2_z3", "roundtrip"):
    fail.append("import then export changed the bytes")
print(f"{len(names)} sharded runs against the single-rank run; "
      f"{sum(len(m) - 1 for m in groups.values())} bitwise comparisons across stages")
for f in fail: print("FAIL:", f)
print("equivalence_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
