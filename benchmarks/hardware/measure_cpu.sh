#!/usr/bin/env bash
# Writes a `--hardware` file describing this CPU machine for `shardtrain simulate`, every
# number measured here by the benchmarks beside this script:
#   peak_flops, mem_bw         sgemm_peak, mem_bandwidth (one core: OMP_NUM_THREADS=1)
#   intra_bw, intra_latency    mpi_p2p (two ranks, ping-pong); one node, so inter_* = intra_*
#   eff_<op class>             op_timings: every kernel of the validation models' micro-
#                              batches against its roofline (benchmarks/kernels)
#   eff_<collective>@<ranks>   mpi_collectives.sh: the engine's collectives on 2, 4 and 8
#                              ranks from 256 KiB to 32 MiB, as curves of efficiency by size
#   compute_slots              the cores: ranks beyond them take turns
# The per-kernel and per-collective tables it measured are kept next to the file (.txt).
#
# Usage: benchmarks/hardware/measure_cpu.sh OUT.hw [NAME]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
name=${2:-$(hostname)-cpu}
bazel build -c opt //benchmarks/... //engine/cli:shardtrain >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
value() { sed -n "s/^$1 = //p"; }
cores=$(getconf _NPROCESSORS_ONLN)
log="${out%.hw}.txt"
{
  echo "# measured $(date -u +%Y-%m-%dT%H:%MZ) on $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $cores cores"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$log"
bazel-bin/benchmarks/sgemm_peak | tee -a "$log" > "$out.sgemm"
bazel-bin/benchmarks/mem_bandwidth | tee -a "$log" > "$out.mem"
mpirun -np 2 --oversubscribe --bind-to none bazel-bin/benchmarks/mpi_p2p | tee -a "$log" > "$out.p2p"
peak=$(value peak_flops < "$out.sgemm")
bw=$(value mem_bw < "$out.mem")
lat=$(value latency < "$out.p2p")
link=$(value bw < "$out.p2p")
rm -f "$out.sgemm" "$out.mem" "$out.p2p"

base="$out.base"
cat > "$base" <<EOF
peak_flops = $peak
mem_bw = $bw
intra_bw = $link
intra_latency = $lat
inter_bw = $link
inter_latency = $lat
compute_slots = $cores
kernels = cpu
EOF
# The validation models' shapes (benchmarks/validate_simulator.sh), without and with tp 2,
# and an optimizer pass over M1's parameters and one over M2's.
bazel-bin/benchmarks/op_timings --hardware "$base" opt,3300000 opt,6500000 \
  256,4,256,4,256,1 256,4,256,4,256,2 512,8,64,1,256,1 | tee -a "$log" > "$out.ops"
benchmarks/hardware/mpi_collectives.sh "$base" 2 4 8 | tee -a "$log" > "$out.coll"
rm -f "$base"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"

{
  echo "# $name: measured by benchmarks/hardware/measure_cpu.sh on $(date -u +%Y-%m-%d)"
  echo "# (the tables it measured: $(basename "$log"))"
  echo "name = $name"
  echo "calibration = measured here: sgemm, memory and MPI ceilings, per-kernel and per-collective timings"
  echo "peak_flops = $peak       # sgemm_peak, one core"
  echo "mem_bw = $bw           # mem_bandwidth (triad), one core"
  echo "intra_bw = $link         # mpi_p2p, two ranks"
  echo "intra_latency = $lat"
  echo "inter_bw = $link         # one node: no network"
  echo "inter_latency = $lat"
  echo "memory_gib = $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)"
  echo "gpus_per_node = 8       # ranks launched on the machine (--gpus-per-node overrides)"
  echo "compute_slots = $cores     # cores: ranks beyond them take turns"
  echo "overlap = 0            # MPI requests progress only inside MPI calls"
  echo "kernels = cpu"
  grep '^eff_' "$out.ops"
  grep '^eff_' "$out.coll"
} > "$out"
rm -f "$out.ops" "$out.coll"
echo "wrote $out (and $log)"
