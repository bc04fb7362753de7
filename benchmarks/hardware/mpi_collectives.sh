#!/usr/bin/env bash
# The engine's own collectives on this machine (`shardtrain selftest`, the MPI backend with its
# non-blocking calls and polling wait; each op timed alone from its last rank's start, with cold
# caches: twice this machine's 32 MiB L3 written before it, as inside a training step) against
# the simulator's model on the link of a hardware file: per op, rank count and buffer size, the
# measured time, the model's time at full link speed (sim_collective.h's ring all-gather and
# reduce-scatter, the faster of ring and tree for the all-reduce, stretched by ranks /
# compute_slots where the ranks outnumber the file's cores, as sim_schedule.c stretches them),
# and their ratio: the fraction of the link the collective reaches. Reductions add arithmetic,
# and the library picks its own algorithms per size, so the ratio depends on the size: Open
# MPI's reduce-scatter here loses more than half its speed between 14 and 16 MiB. The table
# ends with the ratios as the hardware file's curves, `eff_<op>@<ranks> = BYTES:RATIO ...`
# (engine/plan/sim_curve.h).
#
# Usage: benchmarks/hardware/mpi_collectives.sh HARDWARE_FILE [RANKS...]  (default 2 4 8)
# Environment, for a GPU machine (a bundle from tools/gpu_bundle.sh, no Bazel there):
#   SHARDTRAIN=gpu/bin/shardtrain             the binary (default: built here with Bazel)
#   SELFTEST_FLAGS="--device cuda --backend nccl"
#   LAUNCH_WRAPPER=gpu/bin/nccl-hostid        run under mpirun before the binary (ranks sharing
#                                             one GPU over NCCL's socket transport)
# and, where a launch costs seconds (NCCL's set-up) and the time is short:
#   COLLECTIVE_BYTES="4194304 ..."            the totals measured (default: 256 KiB to 32 MiB)
#   COLLECTIVE_RUNS=5 COLLECTIVE_ITERS=20     best of RUNS launches of ITERS timed ops each
set -euo pipefail
hw=$(realpath "$1")
shift
cd "$(dirname "$0")/../.."
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4 8)
st=${SHARDTRAIN:-}
if [ -z "$st" ]; then
  bazel build -c opt //engine/cli:shardtrain >/dev/null 2>&1
  st=bazel-bin/engine/cli/shardtrain
fi
# shellcheck disable=SC2206
launch=(${LAUNCH_WRAPPER:-} "$st" selftest ${SELFTEST_FLAGS:-})
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bw=$(sed -n 's/^intra_bw *= *\([^ #]*\).*/\1/p' "$hw")
lat=$(sed -n 's/^intra_latency *= *\([^ #]*\).*/\1/p' "$hw")
slots=$(sed -n 's/^compute_slots *= *\([^ #]*\).*/\1/p' "$hw")
# Totals from 256 KiB to 32 MiB gathered (or reduced) per collective, denser where Open MPI
# changes its behaviour (8 to 16 MiB); the validation models' units are 0.1 to 12.6 MB.
read -r -a totals <<< "${COLLECTIVE_BYTES:-262144 1048576 4194304 8388608 12582912 16777216 33554432}"
runs=${COLLECTIVE_RUNS:-5}
iters=${COLLECTIVE_ITERS:-20}
echo "link from $hw: intra_bw $bw bytes/s, intra_latency $lat s, compute_slots ${slots:-0};" \
  "best of $runs runs of $iters iterations, each alone with 64 MiB written before it"
printf "%5s %-15s %12s %12s %12s %7s\n" ranks op bytes "measured ms" "model ms" ratio
table=$(mktemp)
trap 'rm -f "$table"' EXIT
for n in "${ranks[@]}"; do
  for total in "${totals[@]}"; do
    count=$((total / 4 / n))
    best=""
    for _ in 1 2 3 4 5; do
      out=$(mpirun -np "$n" --oversubscribe --bind-to none "${launch[@]}" \
        --count "$count" --iters "$iters" --cold-cache-mib 64 2>&1 | grep -E '^shard +[0-9]')
      best=$(printf '%s\n%s\n' "$best" "$out" | awk 'NF >= 6 {
          key = $3; t = $5; if (!(key in m) || t < m[key]) { m[key] = t; b[key] = $4 } }
        END { for (k in m) print k, b[k], m[k] }')
    done
    printf '%s\n' "$best" | sort | while read -r op bytes ms; do
      [ "$op" = broadcast ] && continue
      python3 - "$n" "$op" "$bytes" "$ms" "$bw" "$lat" "${slots:-0}" <<'PY'
import math, sys
n, op = int(sys.argv[1]), sys.argv[2]
nbytes, ms, bw, lat, slots = (float(v) for v in sys.argv[3:8])
ring = (n - 1) / n * nbytes / bw + (n - 1) * lat
if op == "all_reduce":
    tree = 2 * nbytes / bw + 2 * math.ceil(math.log2(n)) * lat
    ring = min(2 * ring, tree)
model = ring * (n / slots if 0 < slots < n else 1)
print("%5d %-15s %12d %12.3f %12.3f %7.4f" % (n, op, nbytes, ms, model * 1e3, model * 1e3 / ms))
PY
    done
  done
done | tee "$table"
# The curves: per rank count and op, the ratios in increasing size.
awk '{ key = "eff_" $2 "@" $1; if (!(key in line)) order[++keys] = key
       line[key] = line[key] " " $3 ":" $6 }
     END { for (k = 1; k <= keys; k++) print order[k] " =" line[order[k]] }' "$table"
