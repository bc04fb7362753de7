#!/usr/bin/env bash
# The step line's and the metrics' MFU and exposed communication (engine/train/step_mfu.h,
# sharding/comm_exposure.h), on the tiny GPT's 10-step runs of train_runs.sh:
#   - one rank at ZeRO-0 communicates nothing: comm_exposed_ms is 0 exactly at every step and
#     every step line says "exposed comm 0.0 ms"; on the CPU without --peak-tflops there is no
#     MFU (null in the metrics, absent from the lines; the start-up summary says why);
#   - two ranks at dp_shard 2, ZeRO-3 wait on their gathers and reductions: comm_exposed_ms > 0
#     at every step (the maximum over ranks; every rank's own is train/comm_exposed_test's); every
#     step records the same bytes per collective, but for the steps after an evaluation (every 4
#     steps): its forwards' gathers are not theirs (they record at most the others' bytes, less
#     where the evaluation left the embedding and final units gathered for them);
#   - with --peak-tflops P the recorded MFU is (tokens/s / 2 ranks) x F / P with F = 772608
#     FLOPs per token computed by hand for the tiny model (6 x 120576 parameters + 6 x 2 layers x
#     64 wide x 64 tokens), within the metrics' 9 digits; each line's MFU is the record's to its
#     printed 0.1%; an MFU above 100% is printed and warned about once, naming the peak.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

run one 1 --zero 0
# A peak this low puts the MFU above 100% at any speed this machine has (over 2.6 tok/s).
run two 2 --dp-shard 2 --zero 3 --micro-batch 4 --peak-tflops 1e-6 \
  --data-val "$work/data/bytes_val_*.bin" --eval-every 4 --eval-batches 2

python3 - "$work" <<'PY'
import json, os, re, sys
work = sys.argv[1]
fail = []
FLOPS_PER_TOKEN = 6 * 120576 + 6 * 2 * 64 * 64  # 772608
assert FLOPS_PER_TOKEN == 772608


def lines(name):
    with open(os.path.join(work, name + ".log")) as f:
        return f.read().splitlines()


def metrics(name):
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [json.loads(line) for line in f]


step_re = re.compile(r"step +(\d+)/10 \| .* \| \d+ tok/s( \| MFU ([\d.]+)%)? \| "
                     r"exposed comm ([\d.]+) ms \| .*")

# One rank, ZeRO-0.
recs, log = metrics("one"), lines("one")
if [r["comm_exposed_ms"] for r in recs] != [0] * 10:
    fail.append(f"one rank: comm_exposed_ms {[r['comm_exposed_ms'] for r in recs]}, want 0 x 10")
if any(r["mfu"] is not None for r in recs):
    fail.append(f"one rank on the CPU: an MFU without a peak: {[r['mfu'] for r in recs]}")
steps = [m for m in map(step_re.fullmatch, log) if m]
if len(steps) != 10 or any(m.group(2) or m.group(4) != "0.0" for m in steps):
    fail.append(f"one rank: step lines {[m.group(0) for m in steps]}")
if "  MFU: not reported: no peak known for the cpu device (--peak-tflops gives one)" not in log:
    fail.append("one rank: the start-up summary does not say why there is no MFU")

# Two ranks, ZeRO-3, --peak-tflops 1e-6.
recs, log = metrics("two"), lines("two")
exposed = [r["comm_exposed_ms"] for r in recs]
if len(exposed) != 10 or not all(e > 0 for e in exposed):
    fail.append(f"two ranks at ZeRO-3: comm_exposed_ms {exposed}, want > 0 at every step")
sent = [r["comm_bytes"] for r in recs]
plain = [b for i, b in enumerate(sent) if i not in (4, 8)]
if any(b != plain[0] for b in plain) or \
        any(sent[i][op] > plain[0][op] for i in (4, 8) for op in plain[0]):
    fail.append(f"two ranks at ZeRO-3: the bytes per step vary, or a step after an evaluation "
                f"counts its traffic: {sent}")
steps = [m for m in map(step_re.fullmatch, log) if m]
if len(steps) != 10:
    fail.append(f"two ranks: {len(steps)} step lines")
for r, m in zip(recs, steps):
    want = r["tokens_per_s"] / 2 * FLOPS_PER_TOKEN / 1e6
    if r["mfu"] is None or abs(r["mfu"] - want) > 1e-7 * want:
        fail.append(f"step {r['step']}: mfu {r['mfu']}, hand formula {want}")
        continue
    if m.group(3) is None or abs(float(m.group(3)) - 100 * r["mfu"]) > 0.05 + 1e-9 * r["mfu"]:
        fail.append(f"step {r['step']}: printed MFU {m.group(3)}%, recorded {r['mfu']}")
    if abs(float(m.group(4)) - r["comm_exposed_ms"]) > 0.05 + 1e-9:
        fail.append(f"step {r['step']}: printed exposed comm {m.group(4)}, "
                    f"recorded {r['comm_exposed_ms']}")
if "  MFU: 772608 FLOPs per token (6N + 6LCT) against 1e-06 TFLOP/s per device (--peak-tflops)" \
        not in log:
    fail.append("two ranks: the start-up summary does not give the MFU's basis")
warnings = [line for line in log if "above 100%" in line]
if len(warnings) != 1 or "1e-06 TFLOP/s per device (--peak-tflops)" not in warnings[0]:
    fail.append(f"two ranks: warnings of an MFU above 100%: {warnings}, want one naming the peak")

for f in fail:
    print("FAIL:", f)
print("step_metrics_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
