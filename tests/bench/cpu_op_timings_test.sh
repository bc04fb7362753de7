#!/usr/bin/env bash
# cpu_op_timings (benchmarks/kernels): it refuses to time more than one thread (its clock is the
# calling thread's CPU time, which misses other threads' work), it refuses a malformed shape or
# hardware file with one error line and exit code 2, and on one thread it times exactly the
# simulator's CPU op list (hand-counted here from engine/plan/sim_ops.c: 32 calls for a tp-1
# micro-batch, 3 for an optimizer pass) and prints one efficiency per class met. Nothing timed
# is asserted. Usage: cpu_op_timings_test.sh CPU_OP_TIMINGS
set -u
here=$(dirname "$0")
# shellcheck source=tests/bench/checks.sh
. "$here/checks.sh"
tool=$1
hw=$(mktemp)
trap 'rm -f "$hw" "$hw.out"' EXIT
cat > "$hw" <<HW
peak_flops = 1e11
mem_bw = 4e10
intra_bw = 1e10
intra_latency = 1e-6
inter_bw = 1e10
inter_latency = 1e-6
kernels = cpu
HW
shape=64,4,16,2,300,1

expect_error 2 'OpenMP and 2 OpenBLAS threads: .*OMP_NUM_THREADS=1' \
  env OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$tool" --hardware "$hw" "$shape"
expect_error 2 '1 OpenMP and 2 OpenBLAS threads' \
  env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2 "$tool" --hardware "$hw" "$shape"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
expect_error 2 "shape '64,4,16' is not C,heads,T,B,vocab,tp" "$tool" --hardware "$hw" 64,4,16
expect_error 2 'cannot open' "$tool" --hardware "$hw.missing" "$shape"

# An optimizer pass long enough (about 0.1 ms for the sum of squares) for the thread clock to
# see every op: at 4096 elements the sum of squares once measured 0 and its class went unprinted.
if "$tool" --hardware "$hw" "$shape" opt,262144 > "$hw.out" 2>&1; then echo "ok: one thread runs"
else echo "FAIL: one thread:"; cat "$hw.out"; fail=1; fi
rows() { grep -cE "^$1 " "$hw.out"; }
counts="embed_fwd $(rows embed_fwd) block_fwd $(rows block_fwd) final_fwd $(rows final_fwd)"
counts="$counts final_bwd $(rows final_bwd) block_bwd $(rows block_bwd) embed_bwd $(rows embed_bwd)"
counts="$counts step $(rows step)"
want="embed_fwd 1 block_fwd 10 final_fwd 3 final_bwd 4 block_bwd 13 embed_bwd 1 step 3"
if [ "$counts" = "$want" ]; then echo "ok: calls per phase: $counts"; else
  echo "FAIL: calls per phase: $counts, want $want"; cat "$hw.out"; fail=1
fi
# Every class the list meets (loss_fwd belongs to evaluation, which the list does not run).
classes=$(sed -n 's/^eff_\([a-z_]*\) = [0-9.]*$/\1/p' "$hw.out" | tr '\n' ' ')
want="matmul attention_fwd attention_bwd norm_fwd norm_bwd gelu_fwd gelu_bwd elementwise fill loss_bwd optimizer grad_norm cast "
if [ "$classes" = "$want" ]; then echo "ok: classes: $classes"; else
  echo "FAIL: classes: '$classes', want '$want'"; cat "$hw.out"; fail=1
fi
exit $fail
