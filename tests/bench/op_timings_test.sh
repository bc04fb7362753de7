#!/usr/bin/env bash
# op_timings (benchmarks/kernels): on the CPU it refuses to time more than one thread (its clock
# is the calling thread's CPU time, which misses other threads' work); it refuses a malformed
# shape, flag, device or dtype and a missing hardware file with one error line and exit code 2;
# and on one thread it times exactly the simulator's op list of the hardware file's kernels
# (hand-counted here from engine/plan/sim_ops.c: 32 calls for a tp-1 micro-batch of the CPU
# list, 21 of the fused list, which the CPU backend also runs; 3 for an optimizer pass) and prints
# one efficiency curve per class met, in lines a hardware file takes (read back here through the
# tool's own --hardware). Nothing timed is asserted, so each op is repeated for 10 ms, not the
# calibration's 0.3 s. A GPU's timings are the GPU suite's
# (tests/gpu/run_gpu_suite.sh); here `--device cuda` finds no GPU and says so.
# Usage: op_timings_test.sh OP_TIMINGS
set -u
here=$(dirname "$0")
# shellcheck source=tests/bench/checks.sh
. "$here/checks.sh"
tool=$1
hw=$(mktemp)
trap 'rm -f "$hw" "$hw.fused" "$hw.out" "$hw.curves"' EXIT
cat > "$hw" <<HW
peak_flops = 1e11
mem_bw = 4e10
intra_bw = 1e10
intra_latency = 1e-6
inter_bw = 1e10
inter_latency = 1e-6
kernels = cpu
HW
sed 's/^kernels = cpu$/kernels = fused/' "$hw" > "$hw.fused"
shape=64,4,16,2,300,1

expect_error 2 '2 OpenMP threads: .*OMP_NUM_THREADS=1' \
  env OMP_NUM_THREADS=2 "$tool" --hardware "$hw" "$shape"
export OMP_NUM_THREADS=1
expect_error 2 "shape '64,4,16' is not C,heads,T,B,vocab,tp" "$tool" --hardware "$hw" 64,4,16
expect_error 2 "shape 'opt,0': N must be >= 1" "$tool" --hardware "$hw" opt,0
expect_error 2 'cannot open' "$tool" --hardware "$hw.missing" "$shape"
expect_error 2 "unknown flag '--threads'" "$tool" --threads 2 --hardware "$hw" "$shape"
expect_error 2 'usage: op_timings' "$tool" --hardware "$hw"
expect_error 2 "--device 'tpu' is not cpu or cuda" "$tool" --device tpu --hardware "$hw" "$shape"
expect_error 2 "--dtype 'fp8' is not fp32 or bf16" "$tool" --dtype fp8 --hardware "$hw" "$shape"
for bad in 0 -1 abc inf 61; do
  expect_error 2 "--seconds-per-op '$bad' is not a number of seconds in "'\(0, 60\]' \
    "$tool" --seconds-per-op "$bad" --hardware "$hw" "$shape"
done
expect_error 2 'the cpu backend does not compute in bf16' \
  "$tool" --dtype bf16 --hardware "$hw" "$shape"
if [ -z "${CUDA_VISIBLE_DEVICES+x}" ] && command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  echo "ok: a GPU is visible: --device cuda is the GPU suite's to time"
else
  expect_error 2 'cuda' "$tool" --device cuda --hardware "$hw" "$shape"
fi

# rows_per_phase FILE: "phase count ..." for the phases a micro-batch and an optimizer pass have.
rows_per_phase() {
  local out="" p
  for p in embed_fwd block_fwd final_fwd final_bwd block_bwd embed_bwd step; do
    out="$out$p $(grep -cE "^$p " "$1") "
  done
  echo "${out% }"
}
# classes FILE: the classes printed as eff_<class> = <curve> or, keyed by the GEMM's smallest
# dimension, eff_<class>@dim = <curve>, in order.
classes() { sed -n 's/^eff_\([a-z_]*\)\(@dim\)\{0,1\} = [0-9.e:+ -]*$/\1/p' "$1" | tr '\n' ' '; }

# expect_list NAME HW CALLS CLASSES: one thread times the hardware file's op list.
expect_list() {
  local name=$1 file=$2 want_calls=$3 want_classes=$4
  # An optimizer pass long enough (about 0.1 ms for the sum of squares) for the thread clock to
  # see every op: at 4096 elements the sum of squares once measured 0 and its class went
  # unprinted.
  if ! "$tool" --seconds-per-op 0.01 --hardware "$file" "$shape" opt,262144 > "$hw.out" 2>&1; then
    echo "FAIL: $name: one thread:"; cat "$hw.out"; fail=1; return
  fi
  local calls got_classes
  calls=$(rows_per_phase "$hw.out")
  got_classes=$(classes "$hw.out")
  if [ "$calls" = "$want_calls" ]; then echo "ok: $name: calls per phase: $calls"; else
    echo "FAIL: $name: calls per phase: $calls, want $want_calls"; cat "$hw.out"; fail=1
  fi
  if [ "$got_classes" = "$want_classes" ]; then echo "ok: $name: classes: $got_classes"; else
    echo "FAIL: $name: classes: '$got_classes', want '$want_classes'"; cat "$hw.out"; fail=1
  fi
  # The matmul class, all GEMMs, is fitted by both keys and says how well each fits.
  if grep -qE '^# matmul: [0-9]+ calls, pooled [0-9.]+; fit error [0-9.]+% by roofline time, [0-9.]+% by smallest dimension$' "$hw.out"; then
    echo "ok: $name: the matmul fit's errors by both keys"
  else
    echo "FAIL: $name: no matmul comment with both fit errors"; cat "$hw.out"; fail=1
  fi
  { cat "$file"; grep '^eff_' "$hw.out"; } > "$hw.curves"
  check "$name: its curves read back as a hardware file" "$tool" --seconds-per-op 0.01 --hardware "$hw.curves" opt,4096
}
# The CPU list: every class but loss_fwd (evaluation's, which the list does not run).
expect_list "cpu kernels" "$hw" \
  "embed_fwd 1 block_fwd 10 final_fwd 3 final_bwd 3 block_bwd 8 embed_bwd 1 step 3" \
  "matmul attention_fwd attention_bwd norm_fwd norm_bwd gelu_fwd gelu_bwd elementwise fill loss_bwd optimizer grad_norm cast "
# The fused list: GELU in the matmuls' epilogues, no zero-fills, one classifier pass (loss_fwd).
expect_list "fused kernels" "$hw.fused" \
  "embed_fwd 1 block_fwd 7 final_fwd 3 final_bwd 2 block_bwd 7 embed_bwd 1 step 3" \
  "matmul attention_fwd attention_bwd norm_fwd norm_bwd elementwise loss_fwd optimizer grad_norm cast "
exit $fail
