#!/usr/bin/env bash
# benchmarks/validate_simulator.sh's measured rows as the GPU machine runs them (--only
# gpu-measured, the binary from SHARDTRAIN, ranks under LAUNCH_WRAPPER), here on the CPU: a tiny
# GPT on 1 and 2 ranks, 2 steps, one round, simulated with a hand-written hardware file. The
# table has one row per configuration with numbers in every column, and each predicted step is
# what `shardtrain simulate` gives for that row's flags on one node of as many devices as ranks,
# in fp32 (train's default) where the row names no dtype. Bad arguments: one line, exit 2.
# Usage: validate_simulator_test.sh SHARDTRAIN
set -uo pipefail
# shellcheck source=tests/bench/checks.sh
. "$(dirname "$0")/checks.sh"
SHARDTRAIN=$(realpath "$1")
export SHARDTRAIN LAUNCH_WRAPPER=tests/nccl_hostid.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # shardtrain starts MPI
work=${TEST_TMPDIR:-$(mktemp -d)}
validate=benchmarks/validate_simulator.sh

cat > "$work/tiny.hw" << 'HW'
# a hand-written machine: 10 GFLOP/s, 10 GB/s, two cores, a 5 GB/s link
peak_flops = 1e10
mem_bw = 1e10
intra_bw = 5e9
intra_latency = 2e-6
inter_bw = 5e9
inter_latency = 2e-6
compute_slots = 2
overlap = 0
kernels = cpu
eff_matmul = 0.5
HW
tiny="--model tiny --seq-len 32 --micro-batch 2"
cat > "$work/rows" << ROWS
# name|ranks|model|mesh and precision
T 1x1x1 zero0|1|$tiny|--zero 0
T 1x2x1 zero3 bf16|2|$tiny|--zero 3 --param-dtype bf16 --reduce-dtype bf16
ROWS

if ! "$validate" --only gpu-measured --device cpu --rows "$work/rows" --hardware "$work/tiny.hw" \
  --steps 2 --rounds 1 > "$work/table.txt" 2> "$work/err.txt"; then
  echo "FAIL: validate_simulator.sh:"; cat "$work/table.txt" "$work/err.txt"; exit 1
fi
cat "$work/table.txt"
number='[0-9]+\.[0-9]'
check "the table's header" grep -qxF \
  '| configuration (model, R x S x T, stage) | ranks | measured ms | predicted ms | error | spread |' \
  "$work/table.txt"
check "two rows, every column a number" test "$(grep -cE \
  "^\| T 1x[12]x1 zero[03]( bf16)? \| [12] \| $number \| $number \| [-+][0-9.]+% \| 0% \|$" \
  "$work/table.txt")" -eq 2

# predicted NAME: the table's predicted column for that row.
predicted() { awk -F' [|] ' -v n="$1" '$1 == "| " n { print $4 }' "$work/table.txt"; }
# simulated FLAGS...: shardtrain simulate's step in ms, to the table's one decimal.
simulated() {
  "$SHARDTRAIN" simulate --hardware "$work/tiny.hw" --nodes 1 "$@" --csv "$work/sim.csv" > /dev/null &&
    python3 -c 'import csv,sys; print("%.1f" % (1e3 * float(next(csv.DictReader(open(sys.argv[1])))["step_s"])))' "$work/sim.csv"
}
# shellcheck disable=SC2086  # $tiny is a list of flags
want1=$(simulated --gpus-per-node 1 $tiny --zero 0 --param-dtype fp32 --reduce-dtype fp32)
# shellcheck disable=SC2086
want2=$(simulated --gpus-per-node 2 $tiny --zero 3 --param-dtype bf16 --reduce-dtype bf16)
check "1 rank, fp32: predicted $(predicted 'T 1x1x1 zero0') = simulate's $want1" \
  test "$(predicted 'T 1x1x1 zero0')" = "$want1"
check "2 ranks, bf16: predicted $(predicted 'T 1x2x1 zero3 bf16') = simulate's $want2" \
  test "$(predicted 'T 1x2x1 zero3 bf16')" = "$want2"

expect_error 2 'gpu-measured needs --hardware' "$validate" --only gpu-measured --device cpu
expect_error 2 "--steps '1' is not a whole number >= 2" "$validate" --steps 1
expect_error 2 "--device 'tpu' is not cpu or cuda" "$validate" --device tpu
expect_error 2 "--only 'tpu' is not cpu, gpu or gpu-measured" "$validate" --only tpu
expect_error 2 "--rows .*/missing: no such file" "$validate" --rows "$work/missing"
expect_error 2 "unknown flag '--fast'" "$validate" --fast
expect_error 2 '--rounds needs a value' "$validate" --rounds
exit $fail
