#!/usr/bin/env bash
# The start-up memory check of `shardtrain train` (engine/train/train_fit.h), on 1 and 2 ranks:
#   - GPT-2 124M with a micro-batch of 100000 sequences (136 TiB of activations) is refused
#     with the machine's real memory: exit 2 within 10 s, and every rank prints one line naming
#     the prediction, the limit and the cheapest change that fits;
#   - nothing large is allocated before the refusal: under ST_MEMORY_LIMIT_BYTES=1e9, d12 with
#     micro-batch 1 (2.3 GiB of model states, zero-filled at creation) is refused while the
#     largest process of the job stays under 500 MB, naming no single change but several
#     together (more ranks, bf16 among them);
#   - at a limit set between the planner's predictions for two runs (read from its debug line),
#     the larger run is refused naming exactly the smaller one as the change that fits, the
#     smaller one starts (exit 0), and --no-fit-check starts the larger one anyway: on 1 rank
#     recomputing the GELU output (the cheapest change), a smaller micro-batch with grad-accum
#     (the GELU recompute already on), recomputing whole blocks (at micro-batch 1, which cannot
#     shrink); a higher ZeRO stage on 2 ranks (whose limit is half of ST_MEMORY_LIMIT_BYTES:
#     they share the host's RAM);
#   - saving in the background (--ckpt-async) counts its snapshot of the optimizer state: at a
#     limit between the predictions with and without it, the run is refused, the line adding
#     that it fits saving blocking, and the same run without --ckpt-async starts;
#   - a malformed ST_MEMORY_LIMIT_BYTES is refused with exit 2.
set -uo pipefail
shardtrain=$1
mpirun_sh=$2
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=${TEST_TMPDIR:-$(mktemp -d)}
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }

# launch RANKS ARGS...: shardtrain train ARGS on RANKS ranks; sets $out, $rc, $seconds, $rss_kb
# (the largest resident set of any process of the job).
launch() {
  local ranks=$1
  shift
  local start=$SECONDS
  out=$(timeout 120 /usr/bin/time -f "maxrss_kb %M" -o "$work/time.txt" \
        "$mpirun_sh" "$ranks" "$shardtrain" train --steps 0 "$@" 2>&1)
  rc=$?
  seconds=$((SECONDS - start))
  rss_kb=$(awk '/maxrss_kb/ {print $2}' "$work/time.txt")
}

# expect_refused RANKS PATTERN ARGS...: exit 2 within 10 s, and each rank prints one refusal
# line that names the prediction, the limit and PATTERN as the change that fits.
expect_refused() {
  local ranks=$1 pattern=$2
  shift 2
  launch "$ranks" "$@"
  local lines
  lines=$(grep -c "error: shardtrain train: does not fit: predicted .* per rank .* > limit .*; cheapest change that fits: $pattern" <<<"$out")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne "$ranks" ] || [ "$seconds" -ge 10 ] ||
     [ "$(grep -c 'error:' <<<"$out")" -ne "$ranks" ]; then
    say_fail "train $* on $ranks ranks: exit $rc (want 2), $lines of $ranks refusal lines naming '$pattern', ${seconds}s:"
    echo "$out"
  else
    echo "ok: refused on $ranks ranks in ${seconds}s: $(grep -m1 'error:' <<<"$out")"
  fi
}

# expect_starts RANKS ARGS...: not refused, exit 0.
expect_starts() {
  local ranks=$1
  shift
  launch "$ranks" "$@"
  if [ "$rc" -ne 0 ] || grep -q "does not fit" <<<"$out"; then
    say_fail "train $* on $ranks ranks: exit $rc (want 0):"; echo "$out"
  else
    echo "ok: train $* starts on $ranks ranks"
  fi
}

# predicted RANKS ARGS...: the bytes the check predicts per rank for the run.
predicted() {
  local ranks=$1
  shift
  ST_LOG_LEVEL=debug ST_MEMORY_LIMIT_BYTES=1e15 "$mpirun_sh" "$ranks" "$shardtrain" train \
    --steps 0 "$@" 2>&1 | sed -n 's/.*memory check: predicted \([0-9]*\) bytes.*/\1/p' | head -1
}

# The real memory, 1 and 2 ranks.
for ranks in 1 2; do
  expect_refused "$ranks" "" --model d12 --micro-batch 100000
  grep -q "the host's available RAM, .*, shared by $ranks rank" <<<"$out" ||
    say_fail "the limit does not say that $ranks ranks share the host's RAM"
done

# Nothing large is allocated before the refusal.
for ranks in 1 2; do
  ST_MEMORY_LIMIT_BYTES=1e9 expect_refused "$ranks" "[0-9]* ranks with this limit each (.*--param-dtype bf16" \
    --model d12 --micro-batch 1
  if [ -z "$rss_kb" ] || [ "$rss_kb" -ge 500000 ]; then
    say_fail "refusing d12 on $ranks ranks took a process of ${rss_kb:-?} kB"
  else
    echo "ok: the largest process of the refused d12 job held $rss_kb kB"
  fi
done

# limit_between SMALL LARGE: a limit that SMALL fits and LARGE (less 3%) exceeds.
limit_between() {
  local small=$1 large=$2
  if [ -z "$small" ] || [ -z "$large" ] || [ $((large * 97 / 100)) -le "$small" ]; then
    say_fail "no limit between predictions '$small' and '$large'"; echo 0; return
  fi
  echo $(((small + large * 97 / 100) / 2))
}

# between SUGGESTION BIG... -- SMALL...: at a limit between the two predictions on 1 rank, BIG
# is refused naming SUGGESTION, SMALL starts, and BIG starts with --no-fit-check.
between() {
  local suggestion=$1
  shift
  local big=() small=()
  while [ "$1" != "--" ]; do big+=("$1"); shift; done
  shift
  small=("$@")
  local limit
  limit=$(limit_between "$(predicted 1 "${small[@]}")" "$(predicted 1 "${big[@]}")")
  ST_MEMORY_LIMIT_BYTES=$limit expect_refused 1 "$suggestion" "${big[@]}"
  ST_MEMORY_LIMIT_BYTES=$limit expect_starts 1 "${small[@]}"
  ST_MEMORY_LIMIT_BYTES=$limit expect_starts 1 "${big[@]}" --no-fit-check
}

# 1 rank: recomputing the GELU output; then, with it on, a smaller micro-batch that keeps the
# global batch with grad-accum; then, at micro-batch 1, recomputing whole blocks.
between "--recompute gelu (predicted" --model tiny --micro-batch 32 -- \
  --model tiny --micro-batch 32 --recompute gelu
between "--micro-batch 16 --grad-accum 2 (the same global batch" \
  --model tiny --micro-batch 32 --recompute gelu -- \
  --model tiny --micro-batch 16 --grad-accum 2 --recompute gelu
between "--recompute block (predicted" --model tiny --micro-batch 1 --recompute gelu -- \
  --model tiny --micro-batch 1 --recompute block

# 2 ranks: model states dominate (wide blocks, short sequences); ZeRO-1 shards the optimizer.
big=(--model tiny --n-embd 256 --seq-len 16 --micro-batch 1 --dp-shard 2)
small=("${big[@]}" --zero 1)
per_rank=$(limit_between "$(predicted 2 "${small[@]}")" "$(predicted 2 "${big[@]}")")
ST_MEMORY_LIMIT_BYTES=$((2 * per_rank)) expect_refused 2 "--zero 1 (predicted" "${big[@]}"
ST_MEMORY_LIMIT_BYTES=$((2 * per_rank)) expect_starts 2 "${small[@]}"
ST_MEMORY_LIMIT_BYTES=$((2 * per_rank)) expect_starts 2 "${big[@]}" --no-fit-check

# 1 rank saving in the background: the snapshot of the optimizer state is what does not fit.
saving=(--model tiny --n-embd 256 --seq-len 16 --micro-batch 1 --ckpt-dir "$work/ck")
limit=$(limit_between "$(predicted 1 "${saving[@]}")" "$(predicted 1 "${saving[@]}" --ckpt-async)")
ST_MEMORY_LIMIT_BYTES=$limit expect_refused 1 \
  ".*; or saving blocking, without --ckpt-async and its snapshot of the optimizer state (predicted" \
  "${saving[@]}" --ckpt-async
ST_MEMORY_LIMIT_BYTES=$limit expect_starts 1 "${saving[@]}"

# A malformed limit.
ST_MEMORY_LIMIT_BYTES=lots launch 1 --model tiny
if [ "$rc" -ne 2 ] || ! grep -q "ST_MEMORY_LIMIT_BYTES='lots' is not a number of bytes" <<<"$out"; then
  say_fail "ST_MEMORY_LIMIT_BYTES=lots: exit $rc"; echo "$out"
fi

[ $fail -eq 0 ] && echo "fit_check_test: passed" || echo "fit_check_test: FAILED"
exit $fail
