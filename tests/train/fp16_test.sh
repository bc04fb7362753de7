#!/usr/bin/env bash
# fp16 parameters with loss scaling train the tiny GPT like fp32 does, and the loss scale behaves
# as specified on every rank. Checked:
#   - 50 steps with fp16 parameters (one rank; dp-shard 2 ZeRO-3 with fp16 reductions too) end
#     within 1% of the fp32 run on the same mesh (final loss, and the mean of the last 5), yet
#     differ from it by more than fp32 rounding somewhere (the dtype flags were honoured); their
#     metrics name the dtypes, the dynamic scale starts at 65536 (the start-up summary says
#     how it scales), and fp32 runs show scale 1 and no skipped step;
#   - an overflow injected on one rank (ST_TEST_INJECT_OVERFLOW) is skipped by EVERY rank:
#     "skipped" counts the world at that step and 0 elsewhere, its grad_norm is null, and the
#     scale halves from the next step (the training would stop with an error if any rank's scale
#     differed), and the run report marks that step and counts it: on a hybrid mesh (r2 x s2, the flag crossing the replicate group) and on
#     tp 2 x s2 with the overflow on a tp rank other than 0 (where the norm leaves the
#     replicated embedding out, so only the flag can see it); a fixed --loss-scale skips the
#     same way but never changes (that run prints a line every 100 steps: the skipped step's
#     line is printed all the same);
#   - --loss-scale-window 3: the scale doubles after every 3 clean steps, an overflow halves it
#     and restarts the count, against the sequence worked out by hand;
#   - that run stopped at step 6 and resumed (--resume) continues bit-identically: the same
#     metrics text for steps 6..9 and a byte-identical export (the checkpoint carries the scale,
#     the clean-step count and the skipped steps, which AdamW's step count leaves out), and
#     `shardtrain inspect` shows the scaler's state; resumed in fp32 instead, the run starts from
#     the fp16 run's masters byte for byte and never scales, and an fp32 checkpoint resumed in
#     fp16 starts the dynamic scale afresh at 65536, while an fp16 checkpoint at scale 1 (a
#     dynamic scale's floor; saved here at a fixed 1) resumed dynamically goes on at 1, and one
#     at a fixed 1000 (no scale a dynamic scaler holds: it would halve below 1) starts afresh at
#     65536, saying why; a run at a fixed scale of 1 still shows its scale on every step line
#     and reports its loss scaling at the end.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"
common=(train --model tiny --data-train "$work/data/bytes_train_*.bin" --lr 3e-3 --warmup 3
        --min-lr 3e-4 --seed 7)

s2=(--dp-shard 2 --zero 3 --micro-batch 4)
run one_fp32 1 --steps 50 --micro-batch 8
run one_fp16 1 --steps 50 --micro-batch 8 --param-dtype fp16
run s2_fp32 2 --steps 50 "${s2[@]}"
run s2_fp16 2 --steps 50 "${s2[@]}" --param-dtype fp16 --reduce-dtype fp16

ST_TEST_INJECT_OVERFLOW=4:3 run inj_r2s2 4 --steps 10 --dp-replicate 2 --dp-shard 2 --zero 2 \
  --micro-batch 2 --param-dtype fp16
ST_TEST_INJECT_OVERFLOW=2:1 run inj_tp2s2 4 --steps 10 --tp 2 --dp-shard 2 --zero 3 \
  --micro-batch 4 --param-dtype fp16
ST_TEST_INJECT_OVERFLOW=3:0 run inj_fixed 2 --steps 10 "${s2[@]}" --param-dtype fp16 \
  --loss-scale 1024 --log-every 100

win=(--steps 10 "${s2[@]}" --param-dtype fp16 --loss-scale-window 3)
ST_TEST_INJECT_OVERFLOW=4:1 run win_full 2 "${win[@]}"
ST_TEST_INJECT_OVERFLOW=4:1 run win_part 2 "${win[@]}" --stop-at 6 --ckpt-dir "$work/ck_win"
run win_res 2 "${win[@]}" --ckpt-dir "$work/ck_win" --resume
"$shardtrain" inspect "$work/ck_win/step_6" > "$work/inspect.txt" 2>&1
# The masters at step 6 (a run ended by --stop-at writes no --export: it has not finished).
"$shardtrain" export "$work/ck_win/step_6" "$work/win_part.safetensors" > /dev/null 2>&1 ||
  fail "exporting ck_win/step_6"
# Across dtypes: the fp16 checkpoint resumed in fp32, and an fp32 checkpoint resumed in fp16.
run win_to_fp32 2 --steps 10 "${s2[@]}" --resume-from "$work/ck_win/step_6" \
  --save-init "$work/win_to_fp32.init.safetensors"
run fp32_part 2 --steps 10 "${s2[@]}" --stop-at 6 --ckpt-dir "$work/ck_fp32"
run fp32_to_fp16 2 --steps 10 "${s2[@]}" --param-dtype fp16 --resume-from "$work/ck_fp32/step_6"
run floor_part 2 --steps 10 "${s2[@]}" --param-dtype fp16 --loss-scale 1 --stop-at 6 \
  --ckpt-dir "$work/ck_floor"
run floor_res 2 --steps 10 "${s2[@]}" --param-dtype fp16 --resume-from "$work/ck_floor/step_6"
run odd_part 1 --steps 8 --micro-batch 4 --param-dtype fp16 --loss-scale 1000 --stop-at 6 \
  --ckpt-dir "$work/ck_odd"
run odd_res 1 --steps 8 --micro-batch 4 --param-dtype fp16 --resume-from "$work/ck_odd/step_6"

PYTHONPATH="$(dirname "$0")" python3 - "$work" <<'PY'
import filecmp, os, sys
from run_outputs import metrics, same_export
work = sys.argv[1]
fail = []

def rel(a, b):
    return abs(a - b) / abs(b)

for name, param, reduce in [("one_fp32", "fp32", "fp32"), ("s2_fp32", "fp32", "fp32"),
                            ("one_fp16", "fp16", "fp32"), ("s2_fp16", "fp16", "fp16")]:
    rows = metrics(work, name)
    bad = [r for r in rows if r["dtypes"] != {"param": param, "reduce": reduce}]
    if len(rows) != 50 or bad:
        fail.append(f"{name}: {len(rows)} steps, {len(bad)} with dtypes other than {param}/{reduce}")
    if param == "fp32" and any(r["loss_scale"] != 1 or r["skipped"] != 0 for r in rows):
        fail.append(f"{name}: fp32 scaled the loss or skipped a step")
    if param == "fp16" and rows and rows[0]["loss_scale"] != 65536:
        fail.append(f"{name}: the dynamic scale starts at {rows[0]['loss_scale']}, not 65536")

# The start-up summary names the loss scaling, and only where there is some.
for name, want in [("one_fp16", "loss scale dynamic from 65536 (doubled every 2000 clean steps)"),
                   ("inj_fixed", "loss scale fixed at 1024"), ("one_fp32", None)]:
    with open(os.path.join(work, name + ".log")) as f:
        mesh_line = [l for l in f if l.startswith("  mesh R x S x T")]
    ok = len(mesh_line) == 1 and (mesh_line[0].rstrip().endswith(", " + want) if want
                                  else "loss scale" not in mesh_line[0])
    if not ok:
        fail.append(f"{name}: start-up summary {mesh_line}, expected it to end with {want!r}")

# fp16 within 1% of fp32 after 50 steps, and not bit-for-bit fp32 either.
for mesh in ("one", "s2"):
    a, b = metrics(work, mesh + "_fp16"), metrics(work, mesh + "_fp32")
    final = rel(a[-1]["loss"], b[-1]["loss"])
    last5 = rel(sum(r["loss"] for r in a[-5:]), sum(r["loss"] for r in b[-5:]))
    largest = max(rel(x["loss"], y["loss"]) for x, y in zip(a, b))
    skipped = sum(1 for r in a if r["skipped"])
    print(f"{mesh}: fp16 final loss {a[-1]['loss']:.6f}, fp32 {b[-1]['loss']:.6f}: "
          f"{final:.2e} relative (last 5 steps {last5:.2e}, largest {largest:.2e}); "
          f"{skipped} steps skipped, final scale {a[-1]['loss_scale']:g}")
    if final > 0.01 or last5 > 0.01:
        fail.append(f"{mesh}: fp16 ends {final:.2e} (last 5: {last5:.2e}) from fp32, over 1%")
    if largest < 1e-5:
        fail.append(f"{mesh}: fp16 never differs from fp32 by more than {largest:.1e}: "
                    f"were the dtype flags ignored?")

# Injected overflows: every rank skips, the scale halves (dynamic) or stays (fixed).
for name, world, step, first in [("inj_r2s2", 4, 4, 65536), ("inj_tp2s2", 4, 2, 65536),
                                 ("inj_fixed", 2, 3, 1024)]:
    rows = metrics(work, name)
    skipped = [r["skipped"] for r in rows]
    want = [world if r["step"] == step else 0 for r in rows]
    if skipped != want:
        fail.append(f"{name}: skipped per step {skipped}, expected {want}")
    if rows[step]["grad_norm"] is not None:
        fail.append(f"{name}: the skipped step reports grad_norm {rows[step]['grad_norm']}")
    with open(os.path.join(work, name + ".log")) as f:
        log = f.read().splitlines()
    marked = [l for l in log if l.endswith("| skipped: fp16 overflow")]
    summary = "fp16 loss scaling: 1 step of this run skipped for overflow, last scale"
    if len(marked) != 1 or f"step {step + 1:5d}/10 " not in marked[0] or \
            not any(l.startswith(summary) for l in log):
        fail.append(f"{name}: the run report marks {marked} as skipped (expected step "
                    f"{step + 1}/10) or lacks '{summary}'")
    after = first / 2 if name != "inj_fixed" else first
    scales = [r["loss_scale"] for r in rows]
    want = [first if r["step"] <= step else after for r in rows]
    if scales != want:
        fail.append(f"{name}: loss scales {scales}, expected {want}")
    print(f"{name}: step {step} skipped by {skipped[step]} of {world} ranks; scales {scales}")

# Window 3 with an overflow at step 4 (worked out by hand): 3 clean steps double, the
# overflow at 131072 halves and restarts the count, 3 more clean steps double again.
want = [65536] * 3 + [131072] * 2 + [65536] * 3 + [131072] * 2
rows = metrics(work, "win_full")
scales = [r["loss_scale"] for r in rows]
if scales != want or [r["skipped"] for r in rows] != [2 if i == 4 else 0 for i in range(10)]:
    fail.append(f"win_full: scales {scales} (expected {want}), skipped "
                f"{[r['skipped'] for r in rows]} (expected 2 at step 4)")
print(f"win_full: scales {scales}")

# The resumed run continues the never-stopped one bit for bit.
keys = ("loss", "grad_norm", "lr", "loss_scale", "skipped")
res = metrics(work, "win_res")
full = {r["step"]: r for r in rows}
if [r["step"] for r in res] != [6, 7, 8, 9]:
    fail.append(f"win_res: steps {[r['step'] for r in res]}, expected 6..9")
for r in res:
    if any(r[k] != full[r["step"]][k] for k in keys):
        fail.append(f"win_res step {r['step']}: {[r[k] for k in keys]} vs the never-stopped "
                    f"{[full[r['step']][k] for k in keys]}")
# The scale it goes on with is the checkpoint's (as inspect read it above), said when resumed.
with open(os.path.join(work, "win_res.log")) as f:
    res_log = f.read()
for want in ("loss scale dynamic from 65536 or a resumed checkpoint's",
             "/ck_win/step_6: step 6, saved on mesh 1x2x1 at ZeRO-3 in fp16; loss scale 65536 "
             "(the checkpoint's), 1 step skipped before"):
    if want not in res_log:
        fail.append(f"win_res: the log lacks '{want}'")
if not same_export(work, "win_full", "win_res"):
    fail.append("win_res: the export differs from the never-stopped run's")
with open(os.path.join(work, "inspect.txt")) as f:
    text = f.read()
line = "loss scale  65536, 1 clean step since it last changed, 1 step skipped"
if line not in text:
    fail.append(f"inspect step_6 lacks '{line}':\n{text}")

# Across dtypes: fp32 starts from the fp16 run's masters and never scales; fp16 from an fp32
# checkpoint (scale 1: nothing to continue) starts its dynamic scale afresh.
if not filecmp.cmp(os.path.join(work, "win_to_fp32.init.safetensors"),
                   os.path.join(work, "win_part.safetensors"), shallow=False):
    fail.append("win_to_fp32: the masters it resumed from differ from the fp16 run's at step 6")
if [(r["step"], r["loss_scale"], r["skipped"]) for r in metrics(work, "win_to_fp32")] != \
        [(s, 1, 0) for s in range(6, 10)]:
    fail.append("win_to_fp32: steps 6..9 should run unscaled, none skipped")
if [r["loss_scale"] for r in metrics(work, "fp32_to_fp16")] != [65536] * 4:
    fail.append("fp32_to_fp16: the dynamic scale should start at 65536 for steps 6..9")
if metrics(work, "floor_res")[0]["loss_scale"] != 1:
    fail.append("floor_res: a checkpoint at scale 1 resumed dynamically should go on at 1")
with open(os.path.join(work, "floor_part.log")) as f:
    floor_log = f.read().splitlines()
step_lines = [l for l in floor_log if l.startswith("step ")]
if not step_lines or any(" | scale 1" not in l for l in step_lines) or \
        not any(l.startswith("fp16 loss scaling: 0 steps of this run skipped") for l in floor_log):
    fail.append("floor_part: at a fixed scale of 1 the step lines or the summary leave the "
                "scaling out")
if [r["loss_scale"] for r in metrics(work, "odd_res")] != [65536] * 2:
    fail.append("odd_res: a fixed 1000 resumed dynamically should start afresh at 65536")
with open(os.path.join(work, "odd_res.log")) as f:
    if "loss scale 65536 (anew: its 1000 is no power of two from 1 to 16777216)" not in f.read():
        fail.append("odd_res: the resumed line does not say why the scale starts anew")

for f in fail: print("FAIL:", f)
print("fp16_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
