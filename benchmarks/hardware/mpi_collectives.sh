#!/usr/bin/env bash
# The engine's own collectives on this machine (`shardtrain selftest`, the MPI backend with its
# non-blocking calls and polling wait) against the simulator's ring model on the link of a
# hardware file: per op and rank count, measured time, the model's time at full link speed,
# and their ratio. The 2-rank ratios at the largest size are the eff_all_gather,
# eff_reduce_scatter and eff_all_reduce of the file: how much of the link each MPI collective
# reaches (reductions add arithmetic, and the library picks its own algorithms).
#
# Usage: benchmarks/hardware/mpi_collectives.sh HARDWARE_FILE [RANKS...]  (default 2 4 8)
set -euo pipefail
cd "$(dirname "$0")/../.."
hw=$1
shift
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4 8)
bazel build -c opt //engine/cli:shardtrain >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bw=$(sed -n 's/^intra_bw *= *\([^ #]*\).*/\1/p' "$hw")
lat=$(sed -n 's/^intra_latency *= *\([^ #]*\).*/\1/p' "$hw")
echo "link from $hw: intra_bw $bw bytes/s, intra_latency $lat s; best of 5 runs of 20 iterations"
printf "%5s %-15s %12s %12s %12s %7s\n" ranks op bytes "measured ms" "model ms" ratio
for n in "${ranks[@]}"; do
  # Totals of 1, 4 and 16 MiB gathered (or reduced) per collective.
  for total in 1048576 4194304 16777216; do
    count=$((total / 4 / n))
    best=""
    for rep in 1 2 3 4 5; do
      out=$(mpirun -np "$n" --oversubscribe --bind-to none bazel-bin/engine/cli/shardtrain selftest \
        --count "$count" --iters 20 2>&1 | grep -E '^shard +[0-9]')
      best=$(printf '%s\n%s\n' "$best" "$out" | awk 'NF >= 6 {
          key = $3; t = $5; if (!(key in m) || t < m[key]) { m[key] = t; b[key] = $4 } }
        END { for (k in m) print k, b[k], m[k] }')
    done
    printf '%s\n' "$best" | sort | while read -r op bytes ms; do
      [ "$op" = broadcast ] && continue
      python3 - "$n" "$op" "$bytes" "$ms" "$bw" "$lat" <<'PY'
import sys
n, op, nbytes, ms, bw, lat = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
steps = 2 * (n - 1) if op == "all_reduce" else n - 1
model = steps / n * nbytes / bw + steps * lat
print("%5d %-15s %12d %12.3f %12.3f %7.3f" % (n, op, nbytes, ms, model * 1e3, model * 1e3 / ms))
PY
    done
  done
done
