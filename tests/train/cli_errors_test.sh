#!/usr/bin/env bash
# Bad input to the shardtrain CLI: each case must exit with the expected code, print exactly
# one error line (per rank) naming the problem, and never hang. The multi-rank case checks that
# every rank reports.
set -uo pipefail
# shardtrain starts MPI even on one rank: under --config=asan, leak detection is off for it as
# for every MPI program (see tests/mpirun.sh for why).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
shardtrain=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0

# expect CODE PATTERN ARGS...: runs shardtrain ARGS with a time limit.
expect() {
  local code=$1 pattern=$2
  shift 2
  local err
  err=$(timeout 60 "$shardtrain" "$@" 2>&1 >/dev/null)
  local rc=$?
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$pattern" <<<"$err" || [ "$lines" -ne 1 ]; then
    echo "FAIL: shardtrain $* -> exit $rc (want $code), $lines error lines, output:"
    echo "$err"
    fail=1
  else
    echo "ok: shardtrain $* -> $rc: $err"
  fi
}

head -c 4096 /dev/zero > "$work/bad.bin"   # a full header whose magic number is 0
printf 'not safetensors' > "$work/bad.safetensors"

expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "unknown flag '--bogus'" train --bogus 1
expect 2 "--steps: 'x' is not an integer" train --steps x
expect 2 "--micro-batch must be >= 1, got 0" train --micro-batch 0
expect 2 "model 'huge' is not one of" train --model huge
expect 2 "n_embd 64 is not divisible by n_head 5" train --n-head 5
expect 2 "--lr-schedule 'linear' is not cosine or constant" train --steps 0 --lr-schedule linear
expect 2 "--data-train is required" train --steps 3
expect 2 "needs a value" train --data-train
expect 2 "$work/nothing" train --data-train "$work/nothing*.bin" --steps 1
expect 2 "magic" train --data-train "$work/bad.bin" --steps 1
expect 2 "$work/missing.safetensors" train --init-from "$work/missing.safetensors" --steps 0
expect 2 "bad.safetensors" train --init-from "$work/bad.safetensors" --steps 0
expect 2 "no usable GPU" train --device cuda --steps 0
expect 2 "--tp: 'two' is not an integer" selftest --tp two
expect 2 "n_layer 2000: at most 1024 layers" train --n-layer 2000 --steps 0

# The depth bound is a sanity check, not a table: a deep model builds (and exports).
if ! timeout 60 "$shardtrain" train --n-layer 80 --steps 0 --export "$work/deep.safetensors" \
     > "$work/deep.log" 2>&1; then
  echo "FAIL: an 80-layer tiny model was refused:"; cat "$work/deep.log"; fail=1
else
  echo "ok: an 80-layer tiny model builds and exports"
fi

# expect_every_rank RANKS CODE PATTERN ARGS...: on RANKS ranks, every rank reports PATTERN
# and the job exits with CODE, within the time limit.
expect_every_rank() {
  local ranks=$1 code=$2 pattern=$3
  shift 3
  local out rc n
  out=$(timeout 60 "$(dirname "$0")/../mpirun.sh" "$ranks" "$shardtrain" "$@" 2>&1)
  rc=$?
  n=$(grep -c -- "$pattern" <<<"$out")
  if [ "$rc" -ne "$code" ] || [ "$n" -ne "$ranks" ]; then
    echo "FAIL: shardtrain $* on $ranks ranks: exit $rc (want $code), $n of $ranks ranks reported"
    echo "$out"
    fail=1
  else
    echo "ok: shardtrain $* refused by all $ranks ranks, exit $rc"
  fi
}

# An impossible mesh, a TP size that does not divide the heads, a param dtype the device cannot
# train with: every rank says so and exits 2, nobody hangs.
expect_every_rank 4 2 "needs 6 ranks, world has 4" selftest --dp-shard 3 --tp 2
expect_every_rank 4 2 "needs 6 ranks, world has 4" train --dp-shard 3 --tp 2 --steps 0
expect_every_rank 3 2 "tp 3 does not divide n_head 4" train --tp 3 --steps 0
expect_every_rank 2 2 "--param-dtype fp16: the cpu device cannot train with fp16 parameters" \
  train --device cpu --param-dtype fp16 --zero 3 --steps 0
expect 2 "--param-dtype 'int8' is not a dtype" train --param-dtype int8 --steps 0
expect 2 "--reduce-dtype 'fp16' is not fp32 or bf16" train --reduce-dtype fp16 --steps 0
expect 2 "--offload 'gpu' is not optimizer or none" train --offload gpu --steps 0
expect 2 "--offload 'params' is not optimizer or none" train --offload params --steps 0

# --help documents every flag the parser accepts.
help=$("$shardtrain" train --help)
for f in model n-layer n-head n-embd vocab seq-len data-train data-val micro-batch grad-accum \
         steps lr warmup lr-schedule weight-decay clip seed init-from save-init export metrics \
         eval-every eval-batches device zero dp-replicate dp-shard tp prefetch \
         reshard-after-forward param-dtype reduce-dtype offload no-fit-check; do
  grep -q -- "--$f " <<<"$help" || { echo "FAIL: train --help lacks --$f"; fail=1; }
done

[ $fail -eq 0 ] && echo "cli_errors_test: passed" || echo "cli_errors_test: FAILED"
exit $fail
