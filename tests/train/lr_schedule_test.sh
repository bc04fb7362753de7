#!/usr/bin/env bash
# The learning-rate schedules through the trainer (optim/lr_schedule.h), on the tiny GPT of
# train_runs.sh (10 steps, warmup 3, lr 3e-3 down to 3e-4), each step's recorded lr against
# the formula computed here:
#   - linear: the straight line from the peak at step 3 to the floor at step 9;
#   - wsd with --decay-steps 4: the peak through step 5, then 3e-4 + (1 - sqrt((s - 5) / 4)) x
#     2.7e-3 over steps 6-9; the start-up summary and `inspect` of its checkpoint say so;
#   - wsd's default decay, a fifth of --steps: the last 2 steps;
#   - a cooldown branched from the stable phase, as scaling studies do: a 20-step wsd run stopped
#     at step 6 (--stop-at, checkpointed), resumed with --steps 10 --decay-steps 4, equals the
#     10-step wsd run above at every step (losses and lr, bit for bit) and in its export.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

run linear 1 --lr-schedule linear
run wsd 1 --lr-schedule wsd --decay-steps 4 --ckpt-dir "$work/wsd_ck"
run wsd_default 1 --lr-schedule wsd
run stable 1 --lr-schedule wsd --steps 20 --decay-steps 4 --stop-at 6 --ckpt-dir "$work/stable"
run branch 1 --lr-schedule wsd --decay-steps 4 --resume-from "$work/stable/step_6"

grep -q "AdamW: lr 0.003 (warmup 3 steps, then constant, then 1-sqrt to 0.0003 over the last 4 steps)" \
  "$work/wsd.log" || { cat "$work/wsd.log"; fail "the start-up summary does not describe wsd"; }
"$shardtrain" inspect "$work/wsd_ck/step_10" > "$work/inspect.log" 2>&1 || fail "inspect failed"
grep -q "AdamW lr 0.003 (warmup 3 steps, then constant, then 1-sqrt to 0.0003 over the last 4 steps; 10 steps)" \
  "$work/inspect.log" || { cat "$work/inspect.log"; fail "inspect does not describe wsd"; }

python3 - "$work" "$(dirname "$0")" <<'PY' || exit 1
import math, sys
sys.path.insert(0, sys.argv[2])
import run_outputs as ro
work = sys.argv[1]
PEAK, FLOOR, WARMUP, STEPS = 3e-3, 3e-4, 3, 10


def expected(shape, step, decay=0):
    if step < WARMUP:
        return PEAK * (step + 1) / WARMUP
    last = STEPS - 1
    # wsd's decay takes at most every step after the warmup, whose last one reached the peak
    start = WARMUP if shape == "linear" else max(WARMUP - 1, last - decay)
    if step <= start:
        return PEAK
    progress = (step - start) / (last - start)
    fraction = 1 - progress if shape == "linear" else 1 - math.sqrt(progress)
    return FLOOR + fraction * (PEAK - FLOOR)


def check(name, shape, decay=0):
    rows = ro.metrics(work, name)
    assert [r["step"] for r in rows] == list(range(STEPS)), (name, [r["step"] for r in rows])
    for r in rows:
        want = expected(shape, r["step"], decay)
        assert abs(r["lr"] - want) <= 1e-9 * want, (name, r["step"], r["lr"], want)
    print(f"{name}: lr {[round(r['lr'], 7) for r in rows]}")


check("linear", "linear")
check("wsd", "wsd", 4)
check("wsd_default", "wsd", 2)
wsd, stable, branch = (ro.metrics(work, n) for n in ("wsd", "stable", "branch"))
assert [r["step"] for r in stable] == list(range(6)), [r["step"] for r in stable]
for a, b in zip(wsd, stable + branch):
    for key in ("loss", "grad_norm", "lr"):
        assert a[key] == b[key], ("the branched cooldown differs", a["step"], key, a[key], b[key])
assert ro.same_export(work, "wsd", "branch"), "the branched cooldown exports other bytes"
print("a cooldown branched at step 6 of a 20-step stable phase equals the 10-step wsd run")
PY
echo "lr_schedule_test: passed"
