#!/usr/bin/env bash
# benchmarks/hardware/measure_gpu.sh without a GPU: its binaries ($BIN) are stand-ins printing
# what the real ones print on the GPU machine, and record how they were called:
#   ceilings      the H100 lines of ceilings.txt: 800 TFLOP/s, 3000 GB/s, 79.1 GiB
#   mpi_p2p       latency 2e-06 s, bw 1e10 B/s (rank 0, as the real one)
#   op_timings    two classes' efficiencies: a curve and a number
#   shardtrain    selftest: every collective 1.000 ms (rank 0, the real one's row format)
#   nccl-hostid   the bundle's wrapper (tests/nccl_hostid.sh)
# The file must hold, worked out by hand: peak_flops 8e14; peak_flops_fp32 8e14 x 67/989 =
# 5.42e13; mem_bw 3e12; memory_gib 79.1; intra and inter 1e10 B/s and 2e-06 s; one compute slot,
# overlap, fused kernels; op_timings' two efficiency lines; and a curve per collective on 2, 4 and
# 8 ranks at 4, 16 and 64 MiB, e.g. the all-gather's on 2 ranks at 4 MiB: the ring's
# (2 - 1) / 2 x 4194304 B / 1e10 B/s + 1 x 2e-6 s = 0.2117152 ms, times 2 ranks on one compute
# slot = 0.4234 ms, over the 1.000 ms measured: 0.4234. `shardtrain simulate` accepts the file.
# op_timings ran with --device cuda --dtype bf16 on the d12 and d48 shapes and two optimizer
# passes against a hardware file of the measured keys, and every selftest launch with --device
# cuda --backend nccl and its own NCCL_HOSTID. Without a GPU (the real ceilings prints SKIP): one
# line, exit 1; a BIN without one of the binaries: one line, exit 2.
# Usage: measure_gpu_test.sh SHARDTRAIN CEILINGS
set -uo pipefail
# shellcheck source=tests/bench/checks.sh
. "$(dirname "$0")/checks.sh"
shardtrain=$(realpath "$1")
ceilings=$(realpath "$2")
work=${TEST_TMPDIR:-$(mktemp -d)}
measure=benchmarks/hardware/measure_gpu.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's session directory, unique and short (as tests/mpirun.sh makes it).
session=$(mktemp -d /tmp/st-mpi.XXXXXX)
trap 'rm -rf "$session"' EXIT
export TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session

bin=$work/bin
mkdir -p "$bin"
cat > "$bin/ceilings" << EOF
#!/usr/bin/env bash
cat "$PWD/tests/bench/ceilings.txt"
EOF
cat > "$bin/mpi_p2p" << 'EOF'
#!/usr/bin/env bash
[ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ] && printf '%12d %12.2f %10s\nlatency = 2e-06\nbw = 1e+10\n' 8 2 -
exit 0
EOF
cat > "$bin/op_timings" << EOF
#!/usr/bin/env bash
echo "\$*" > "$work/op_timings.args"
cp "\$2" "$work/op_timings.hw"
printf 'per class: efficiency by roofline time\neff_matmul = 1e-05:0.41 0.001:0.612  # pooled 0.6\neff_attention_fwd = 0.377\n'
EOF
cat > "$bin/shardtrain" << EOF
#!/usr/bin/env bash
echo "\${NCCL_HOSTID:-none} \$*" >> "$work/selftest.log"
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || exit 0
n=\$OMPI_COMM_WORLD_SIZE
count=\$(sed -n 's/.*--count \([0-9]*\).*/\1/p' <<< "\$*")
for op in all_gather reduce_scatter all_reduce broadcast; do
  case \$op in all_gather | reduce_scatter) bytes=\$((count * n * 4)) ;; *) bytes=\$((count * 4)) ;; esac
  printf '%-10s %5d  %-15s %14d %9.3f ms %12.3f  %s\n' shard "\$n" "\$op" "\$bytes" 1 1 ok
done
EOF
cp tests/nccl_hostid.sh "$bin/nccl-hostid"
chmod +x "$bin"/*

if ! BIN=$bin "$measure" "$work/gpu.hw" > "$work/out.txt" 2>&1; then
  echo "FAIL: measure_gpu.sh:"; cat "$work/out.txt"; exit 1
fi
cat "$work/gpu.hw"
# has KEY VALUE: the file's line for KEY (its comment aside) holds exactly VALUE.
has() {
  check "$1 = $2" test "$(sed -n "s/^$1 = \([^ #]*\).*/\1/p" "$work/gpu.hw")" = "$2"
}
has peak_flops 8e+14
has peak_flops_fp32 5.42e+13
has mem_bw 3e+12
has memory_gib 79.1
has intra_bw 1e+10
has intra_latency 2e-06
has inter_bw 1e+10
has inter_latency 2e-06
has compute_slots 1
has overlap 1
has kernels fused
check "op_timings' curve" grep -qxF 'eff_matmul = 1e-05:0.41 0.001:0.612  # pooled 0.6' "$work/gpu.hw"
has eff_attention_fwd 0.377
check "the whole name" grep -qxF 'name = NVIDIA H100 80GB HBM3 (ranks sharing one GPU)' "$work/gpu.hw"
check "a curve per collective and rank count" test "$(grep -cE \
  '^eff_(all_gather|reduce_scatter|all_reduce)@[248] = [0-9]+:[0-9.]+ [0-9]+:[0-9.]+ [0-9]+:[0-9.]+$' \
  "$work/gpu.hw")" -eq 9
check "the all-gather's on 2 ranks at 4 MiB: 0.4234" grep -qE '^eff_all_gather@2 = 4194304:0\.4234 ' \
  "$work/gpu.hw"
check "shardtrain simulate reads the file" "$shardtrain" simulate --hardware "$work/gpu.hw" \
  --gpus-per-node 4 --model d12 --zero 3 --micro-batch 4
check "the tables beside it" grep -q '^gemm_bf16 .*tflops=800.0' "$work/gpu.txt"
check "op_timings: device, dtype, shapes" test "$(cut -d' ' -f3- "$work/op_timings.args")" = \
  "--device cuda --dtype bf16 768,12,1024,8,50257,1 1600,25,1024,4,50257,1 opt,124439808 opt,194701400"
check "op_timings: against the measured keys" grep -qx 'peak_flops = 8e+14 .*' "$work/op_timings.hw"
check "every selftest through NCCL, each rank its own host" test "$(grep -cvE \
  '^shardtrain-rank-[0-7] selftest --device cuda --backend nccl --count [0-9]+ --iters 5 --cold-cache-mib 64$' \
  "$work/selftest.log")" -eq 0

if [ -z "${CUDA_VISIBLE_DEVICES+x}" ] && command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  echo "ok: a GPU is visible: measure_gpu.sh is the GPU suite's to run"
else
  ln -sf "$ceilings" "$bin/ceilings"
  expect_error 1 '^measure_gpu: SKIP ceilings' env BIN="$bin" "$measure" "$work/none.hw"
fi
rm "$bin/mpi_p2p"
expect_error 2 'mpi_p2p: no such executable' env BIN="$bin" "$measure" "$work/none.hw"
expect_error 2 'usage: .*measure_gpu.sh OUT.hw' "$measure"
exit $fail
