#!/usr/bin/env bash
# Writes a `--hardware` file for `shardtrain simulate` describing ranks that share this
# machine's ONE GPU (the GPU suite's machine: 1 to 8 ranks, NCCL's socket transport between
# them), every number measured here but one:
#   peak_flops, mem_bw         ceilings: a large bf16 cuBLASLt GEMM (FLOP/s), a device-to-device
#                              copy (bytes read + written per second)
#   memory_gib                 ceilings: the device's memory
#   peak_flops_fp32            NOT measured: peak_flops x 67/989, the H100 datasheet's fp32 to
#                              dense-bf16 ratio (engine/plan/sim_hw.c's h100 row); the rows this
#                              file is validated on train in bf16
#   intra_bw, intra_latency    mpi_p2p (two ranks, ping-pong, the host's MPI); one machine, so
#                              inter_* = intra_*; NCCL's socket transport is slower, and its
#                              curves below are fractions of this link
#   eff_<op class>             op_timings --device cuda --dtype bf16 on the fused op list: a
#                              micro-batch of GPT-2 124M (d12) and of 1.5B (d48), an optimizer
#                              pass over 124M elements and one over 1.5B / 8
#   eff_<collective>@<ranks>   mpi_collectives.sh through NCCL on 2, 4 and 8 ranks sharing the
#                              GPU (nccl-hostid), 4 to 64 MiB, best of 2 launches of 5 ops
#   compute_slots = 1          the ranks take turns on the one GPU; overlap = 1 (NCCL's streams
#                              progress while the GPU computes); kernels = fused
# The tables it measured are kept next to the file (.txt); the steps it shares with
# measure_cpu.sh are in measure_common.sh. About 2.5 minutes on an H100 (an estimate: it was
# written on a machine without a GPU; tests/gpu/run_gpu_suite.sh calibrate lists its parts).
#
# Usage: benchmarks/hardware/measure_gpu.sh OUT.hw [NAME]
# Binaries: from $BIN (a bundle's bin/: ceilings, op_timings, mpi_p2p, shardtrain,
# nccl-hostid), e.g. on the GPU machine after tests/gpu/run_gpu_suite.sh has unpacked the bundle:
#   source gpu/env.sh && BIN=gpu/bin benchmarks/hardware/measure_gpu.sh gpu/h100.hw
# Without BIN they are built here with Bazel. No usable GPU: one line, exit 1.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT.hw [NAME]" >&2; exit 2; }
out=$(realpath -m "$1")
[ -z "${BIN:-}" ] || bin=$(realpath -m "$BIN")
cd "$(dirname "$0")/../.."
# shellcheck source=benchmarks/hardware/measure_common.sh
. benchmarks/hardware/measure_common.sh
if [ -n "${BIN:-}" ]; then
  tools=$bin st=$bin/shardtrain wrapper=$bin/nccl-hostid
else
  bazel build //benchmarks:ceilings //benchmarks:op_timings //benchmarks:mpi_p2p \
    //engine/cli:shardtrain >/dev/null 2>&1
  tools=$PWD/bazel-bin/benchmarks st=$PWD/bazel-bin/engine/cli/shardtrain
  wrapper=$PWD/tests/nccl_hostid.sh
fi
for b in "$tools/ceilings" "$tools/op_timings" "$tools/mpi_p2p" "$st" "$wrapper"; do
  [ -x "$b" ] || { echo "measure_gpu: $b: no such executable" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ceilings=$("$tools/ceilings")
if grep -q '^SKIP' <<< "$ceilings"; then
  echo "measure_gpu: $(head -1 <<< "$ceilings")" >&2
  exit 1
fi
# ceiling LINE KEY [SCALE]: KEY's value on the ceilings' line that starts with LINE (times
# SCALE, to 4 digits, where given).
ceiling() {
  python3 - "$ceilings" "$@" <<'PY'
import shlex, sys
text, line, key = sys.argv[1:4]
fields = [w for l in text.splitlines() for w in [shlex.split(l)] if w and w[0] == line][0]
value = dict(f.split("=", 1) for f in fields[1:])[key]
print("%.4g" % (float(value) * float(sys.argv[4])) if len(sys.argv) > 4 else value)
PY
}
device=$(ceiling device name)
name=${2:-$device (ranks sharing one GPU)}
measure_begin "$out" "$device, $(ceiling device sms) SMs, $(getconf _NPROCESSORS_ONLN) cores"
echo "$ceilings" >> "$log"
peak=$(ceiling gemm_bf16 tflops 1e12)
measure_link "$tools/mpi_p2p"
cat > "$keys" <<EOF
name = $name
calibration = measured here: bf16 GEMM, copy and MPI ceilings, per-kernel (bf16) and NCCL timings
peak_flops = $peak       # ceilings: bf16 GEMM
peak_flops_fp32 = $(python3 -c 'import sys; print("%.4g" % (float(sys.argv[1]) * 67 / 989))' "$peak")   # not measured: peak_flops x 67/989 (H100 datasheet)
mem_bw = $(ceiling copy_d2d gbps 1e9)       # ceilings: device-to-device copy
intra_bw = $link_bw         # mpi_p2p, two ranks
intra_latency = $link_latency
inter_bw = $link_bw         # one machine: no network
inter_latency = $link_latency
memory_gib = $(ceiling device mem_gib)
gpus_per_node = 8       # ranks launched on the machine (--gpus-per-node overrides)
compute_slots = 1       # one GPU: the ranks take turns
overlap = 1             # NCCL's streams progress while the GPU computes
kernels = fused
EOF
# NCCL through its socket transport: each launch sets NCCL up (seconds), so fewer sizes,
# launches and repetitions than on the CPU.
export SHARDTRAIN=$st LAUNCH_WRAPPER=$wrapper SELFTEST_FLAGS="--device cuda --backend nccl"
export COLLECTIVE_BYTES="4194304 16777216 67108864" COLLECTIVE_RUNS=2 COLLECTIVE_ITERS=5
# GPT-2 124M and 1.5B at seq 1024 with the validation's micro-batches (8 and 4), optimizer
# passes over 124M elements and over 1.5B / 8 (a ZeRO shard of 8 ranks).
measure_finish measure_gpu.sh "2 4 8" "$tools/op_timings" --device cuda --dtype bf16 \
  768,12,1024,8,50257,1 1600,25,1024,4,50257,1 opt,124439808 opt,194701400
