#!/usr/bin/env bash
# tools/plot_metrics.py draws valid PNGs, headless: from synthetic metrics (one run; two runs
# with labels; a file holding a run started again, with a malformed line) and from a real
# 20-step training run with evaluations. Bad input (a missing file, an empty one, one without a
# single metrics record, --labels that do not match, an --out in a missing directory, no --out)
# prints exactly one error line, exits 2 and writes no PNG.
set -uo pipefail
# shardtrain starts MPI even on one rank: under --config=asan, leak detection is off for it as
# for every MPI program (see tests/mpirun.sh for why).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
plot=$1
shardtrain=$2
prepare=$3
png_check=$4
work=${TEST_TMPDIR:-$(mktemp -d)}
unset DISPLAY # headless, whatever the machine
fail=0

# synthetic FILE STEPS [VAL_EVERY [FIRST]]: metrics lines as shardtrain writes them (the fields
# the plot reads, plus a few it ignores), steps FIRST to STEPS - 1.
synthetic() {
  python3 - "$@" <<'PY'
import json, math, sys
path, steps = sys.argv[1], int(sys.argv[2])
every = int(sys.argv[3]) if len(sys.argv) > 3 else 0
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
with open(path, "a") as f:
    for s in range(first, steps):
        rec = {"step": s, "loss": 5.5 * math.exp(-s / 30) + 1, "lr": 1e-3, "grad_norm": 1.0,
               "tokens": 512 * (s + 1), "tokens_per_s": 30000 + 100 * (s % 7), "step_ms": 15.0,
               "mesh": [1, 1, 1], "zero": 0}
        if every and (s + 1) % every == 0:
            rec["val_loss"] = rec["loss"] + 0.1
        f.write(json.dumps(rec) + "\n")
PY
}

# valid_png FILE: a real PNG of at least 400 x 300 pixels (valid_png.py).
valid_png() {
  python3 "$png_check" "$1"
}

# expect_png NAME STEPS ARGS...: the tool succeeds, writes a valid $work/NAME.png and says it
# drew STEPS steps in all.
expect_png() {
  local name=$1 steps=$2 out
  shift 2
  rm -f "$work/$name.png"
  if ! out=$(timeout 120 "$plot" "$@" --out "$work/$name.png" 2>&1); then
    echo "FAIL: $name: plot_metrics.py $* failed:"; echo "$out"; fail=1; return
  fi
  if ! grep -q "run(s), $steps steps$" <<<"$out"; then
    echo "FAIL: $name: want $steps steps drawn: $out"; fail=1
  fi
  if [ ! -s "$work/$name.png" ] || ! info=$(valid_png "$work/$name.png" 2>&1); then
    echo "FAIL: $name: no valid PNG: $info"; fail=1; return
  fi
  echo "ok: $name: $info"
}

# expect_error PATTERN ARGS...: exit 2, exactly one line on stderr matching PATTERN, no PNG.
expect_error() {
  local pattern=$1 err rc lines
  shift
  rm -f "$work/bad.png"
  err=$(timeout 120 "$plot" "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" <<<"$err" ||
     [ -e "$work/bad.png" ]; then
    echo "FAIL: plot_metrics.py $* -> exit $rc (want 2), $lines lines:"; echo "$err"; fail=1
  else
    echo "ok: plot_metrics.py $* -> $rc: $err"
  fi
}

synthetic "$work/a.jsonl" 60 10
synthetic "$work/b.jsonl" 40
synthetic "$work/again.jsonl" 30 5
echo '{"step": 3, "loss": 2.0, "tok' >> "$work/again.jsonl" # a line cut short by a crash
synthetic "$work/again.jsonl" 12 4                          # the run started again
synthetic "$work/resumed.jsonl" 30 5
synthetic "$work/resumed.jsonl" 50 5 20 # resumed from step 20: steps 20-29 are redone
expect_png one 60 "$work/a.jsonl"
expect_png two 100 "$work/a.jsonl" "$work/b.jsonl" --labels "run a,run b"
expect_png again 12 "$work/again.jsonl"
expect_png resumed 50 "$work/resumed.jsonl"
warning=$("$plot" "$work/again.jsonl" --out "$work/again.png" 2>&1 >/dev/null)
grep -q "skipped 1 line" <<<"$warning" || { echo "FAIL: no warning for the cut line: $warning"; fail=1; }

# A real run's metrics.
python3 "$prepare" --out-dir "$work/data" > /dev/null || exit 1
if ! "$shardtrain" train --model tiny --data-train "$work/data/bytes_train_*.bin" \
     --data-val "$work/data/bytes_val_*.bin" --steps 20 --eval-every 5 --eval-batches 2 \
     --quiet --metrics "$work/real.jsonl" > "$work/real.log" 2>&1; then
  echo "FAIL: the training run failed:"; cat "$work/real.log"; exit 1
fi
expect_png real 80 "$work/real.jsonl" "$work/a.jsonl" --labels real,synthetic

: > "$work/empty.jsonl"
printf 'not json\n{"step": "one"}\n[1, 2]\n' > "$work/garbage.jsonl"
expect_error "$work/missing.jsonl: No such file" "$work/missing.jsonl" --out "$work/bad.png"
expect_error "$work/empty.jsonl: no metrics records" "$work/empty.jsonl" --out "$work/bad.png"
expect_error "$work/garbage.jsonl: no metrics records" "$work/garbage.jsonl" --out "$work/bad.png"
expect_error "--labels names 1 run(s) for 2 metrics file(s)" "$work/a.jsonl" "$work/b.jsonl" \
  --labels solo --out "$work/bad.png"
expect_error "directory $work/nowhere does not exist" "$work/a.jsonl" --out "$work/nowhere/x.png"
expect_error "the following arguments are required: --out" "$work/a.jsonl"

[ $fail -eq 0 ] && echo "plot_metrics_test: passed" || echo "plot_metrics_test: FAILED"
exit $fail
