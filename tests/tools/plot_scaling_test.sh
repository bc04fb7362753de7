#!/usr/bin/env bash
# tools/plot_scaling.py draws a valid PNG, headless, from a real `simulate --sweep --csv`; bad
# input (a missing CSV, one that is not a sweep's, an output in a missing directory or that is a
# directory, no output) prints exactly one error line, exits 2 and writes no PNG.
set -uo pipefail
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
plot=$1
shardtrain=$2
png_check=$3
work=${TEST_TMPDIR:-$(mktemp -d)}
unset DISPLAY # headless, whatever the machine
fail=0

# expect_error PATTERN ARGS...: exit 2, exactly one line on stderr matching PATTERN, no PNG.
expect_error() {
  local pattern=$1 err rc lines
  shift
  err=$(timeout 60 python3 "$plot" "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" <<<"$err" ||
    [ -e "$work/bad.png" ]; then
    echo "FAIL: plot_scaling.py $* -> exit $rc (want 2), $lines lines:"; echo "$err"; fail=1
  else
    echo "ok: plot_scaling.py $* -> $rc: $err"
  fi
}

"$shardtrain" simulate --gpu h100 --model tiny --sweep 8,16 --configs zero1,hsdp3 \
  --csv "$work/sweep.csv" > /dev/null || { echo "FAIL: the sweep failed"; exit 1; }
if out=$(timeout 120 python3 "$plot" "$work/sweep.csv" "$work/sweep.png" --gpu-gib 40 2>&1) &&
  grep -q "(4 points, 2 configurations)" <<<"$out" &&
  info=$(python3 "$png_check" "$work/sweep.png"); then
  echo "ok: $info"
else
  echo "FAIL: plot_scaling.py did not draw the sweep: $out"; fail=1
fi

expect_error "$work/missing.csv: No such file" "$work/missing.csv" "$work/bad.png"
echo "x,y" > "$work/other.csv"
expect_error "$work/other.csv: not a simulate --sweep CSV" "$work/other.csv" "$work/bad.png"
expect_error "directory $work/nowhere does not exist" "$work/sweep.csv" "$work/nowhere/x.png"
expect_error "output $work is a directory" "$work/sweep.csv" "$work"
expect_error "the following arguments are required: png" "$work/sweep.csv"

[ $fail -eq 0 ] && echo "plot_scaling_test: passed" || echo "plot_scaling_test: FAILED"
exit $fail
