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
# The per-kernel and per-collective tables it measured are kept next to the file (.txt); the
# steps it shares with measure_gpu.sh are in measure_common.sh.
#
# Usage: benchmarks/hardware/measure_cpu.sh OUT.hw [NAME]
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=benchmarks/hardware/measure_common.sh
. benchmarks/hardware/measure_common.sh
name=${2:-$(hostname)-cpu}
bazel build -c opt //benchmarks/... //engine/cli:shardtrain >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(getconf _NPROCESSORS_ONLN)
measure_begin "$1" "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $cores cores"
peak=$(bazel-bin/benchmarks/sgemm_peak | tee -a "$log" | measured peak_flops)
bw=$(bazel-bin/benchmarks/mem_bandwidth | tee -a "$log" | measured mem_bw)
measure_link bazel-bin/benchmarks/mpi_p2p
cat > "$keys" <<EOF
name = $name
calibration = measured here: sgemm, memory and MPI ceilings, per-kernel and per-collective timings
peak_flops = $peak       # sgemm_peak, one core
mem_bw = $bw           # mem_bandwidth (triad), one core
intra_bw = $link_bw         # mpi_p2p, two ranks
intra_latency = $link_latency
inter_bw = $link_bw         # one node: no network
inter_latency = $link_latency
memory_gib = $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
gpus_per_node = 8       # ranks launched on the machine (--gpus-per-node overrides)
compute_slots = $cores     # cores: ranks beyond them take turns
overlap = 0            # MPI requests progress only inside MPI calls
kernels = cpu
EOF
# The validation models' shapes (benchmarks/validate_simulator.sh), without and with tp 2,
# and an optimizer pass over M1's parameters and one over M2's.
measure_finish measure_cpu.sh "2 4 8" bazel-bin/benchmarks/op_timings opt,3300000 opt,6500000 \
  256,4,256,4,256,1 256,4,256,4,256,2 512,8,64,1,256,1
