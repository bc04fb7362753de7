#!/usr/bin/env bash
# What a person sees of `shardtrain train` (engine/train/run_report.h), and the AdamW flags reaching
# the optimizer. Checked, on the tiny GPT's 10-step runs of train_runs.sh:
#   - the start-up summary, printed once by rank 0 (1 and 2 ranks): model and parameter count,
#     mesh and stage, dtypes, tokens per step, optimizer, predicted memory and the device's;
#   - one line per step carrying the loss of the metrics, the elapsed time and an ETA of 0 at
#     the end;
#   - the final summary: tokens, the mean tok/s of steps 2-10 (recomputed from the metrics),
#     the best val loss and its step, peak memory, the export and metrics paths; a count of 1
#     in the singular (a one-step run's "1 step", one rank's checkpoint "in 1 file");
#   - --quiet prints nothing at all and changes nothing else (same metrics, export written);
#   - --log-every 3 prints the lines of steps 3, 6 and 9, of the evaluations' steps (4, 8) and of
#     the last (10), the same lines as without it; the metrics keep every step;
#   - with a GPT-2-sized vocabulary (50257: set-up's host scratch for the initial values of the
#     largest parameter, wte, and --save-init's export are a tenth of the run), the steps'
#     peak per memory category and the peak line are the start-up prediction within 3%, and so
#     they are with checkpoints saved between the steps (2 ranks at ZeRO-3, --ckpt-every 1:
#     the save's 1 MiB host staging is in the workspace), and so they are saving in the
#     background (--ckpt-async: the snapshot of the owned master, m and v is in the workspace,
#     with the steps' own); on the tiny vocabulary, where that staging is a tenth of the run,
#     the peak line of a run with checkpoints is within 3% too
#     (its measured peak includes the save after step 2, which step 3's record holds), and so
#     is a run's whose only save follows its last step, which no step's record holds;
#   - a node whose ranks run more OpenMP threads than it has CPUs is warned of once (the node's
#     first rank), naming the OMP_NUM_THREADS that fits; one within its CPUs is not;
#   - --beta1 0.9 --beta2 0.95 --eps 1e-8 reproduce the default run bit for bit; changing a beta
#     leaves the losses of steps 0 and 1 as they were (AdamW's first, bias-corrected update is
#     g / (|g| + eps), whatever the betas) and changes step 2's; changing eps changes step 1's.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

val=(--data-val "$work/data/bytes_val_*.bin" --eval-every 4 --eval-batches 2)
run plain 1 "${val[@]}"
run quiet 1 "${val[@]}" --quiet
run logged 1 "${val[@]}" --log-every 3
run two 2 --dp-shard 2 --zero 3 --micro-batch 4
run base 1
run defaults 1 --beta1 0.9 --beta2 0.95 --eps 1e-8
run beta1 1 --beta1 0.5
run beta2 1 --beta2 0.999
run eps 1 --eps 1e-3
run wide 1 --steps 2 --vocab 50257 --micro-batch 2 --save-init "$work/wide_init.safetensors"
run wide_ckpt 2 --steps 2 --vocab 50257 --micro-batch 2 --dp-shard 2 --zero 3 \
  --ckpt-dir "$work/wide_ckpt" --ckpt-every 1
run wide_async 2 --steps 2 --vocab 50257 --micro-batch 2 --dp-shard 2 --zero 3 \
  --ckpt-dir "$work/wide_async" --ckpt-every 1 --ckpt-async
run ckpt 1 --steps 4 --ckpt-dir "$work/ckpt" --ckpt-every 2
run ckpt_end 1 --steps 2 --ckpt-dir "$work/ckpt_end"
run one_step 1 --steps 1
# More OpenMP threads per rank than the node's CPUs over its ranks (the test environment's 1 per
# rank fits, even with more ranks than CPUs).
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # the CPUs its ranks may run on
OMP_NUM_THREADS=$((cpus + 1)) run threads 2 --steps 1 --dp-shard 2

python3 - "$work" "$cpus" <<'PY'
import json, os, re, sys
work, cpus = sys.argv[1], int(sys.argv[2])
fail = []


def log(name):
    with open(os.path.join(work, name + ".log")) as f:
        return f.read().splitlines()


def metrics(name):
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [json.loads(line) for line in f]


def one(lines, pattern, what):
    """The match of the only line matching pattern (a failure when there are 0 or several)."""
    found = [m for m in (re.fullmatch(pattern, line) for line in lines) if m]
    if len(found) != 1:
        fail.append(f"{what}: {len(found)} lines match {pattern!r}")
        return None
    return found[0]


def seconds(text):
    if text.endswith("s"):
        return float(text[:-1])
    parts = [int(p) for p in text.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


# The start-up summary of the one-rank run.
lines, recs = log("plain"), metrics("plain")
one(lines, r"shardtrain train: model tiny, 120576 parameters \(0\.12 M\): 2 layers, 4 heads, "
    r"width 64, vocab 256, 64 positions", "model")
one(lines, r"  mesh R x S x T = 1 x 1 x 1 \(1 rank\), ZeRO stage 0, device cpu, collectives mpi, "
    r"dtypes param fp32 / reduce fp32", "mesh")
one(lines, r"  batch 512 tokens per step = micro-batch 8 x 64 tokens x 1 dp rank x grad-accum 1; "
    r"10 steps = 5120 tokens", "batch")
one(lines, r"  AdamW: lr 0\.003 \(warmup 3 steps, then cosine to 0\.0003\), beta1 0\.9, beta2 0\.95, "
    r"eps 1e-08, weight decay 0\.1, clip 1", "optimizer")
m = one(lines, r"  memory per rank, predicted: params [\d.]+ KiB, grads [\d.]+ KiB, optimizer .*, "
        r"total ([\d.]+ [KMG]iB)", "predicted memory")
predicted = m.group(1) if m else None
one(lines, r"  cpu memory: [\d.]+ GiB available of [\d.]+ GiB; predicted use [\d.]+ [KMG]iB: fits",
    "device memory")

# One line per step, agreeing with the metrics.
step_re = (r"step +(\d+)/10 \| loss ([\d.]+) \| lr \S+ \| norm \S+ \| \S+ ms \| \d+ tok/s \| "
           r"exposed comm [\d.]+ ms \| (\S+) elapsed \| ETA (\S+)( \| val ([\d.]+))?")
steps = [m for m in (re.fullmatch(step_re, line) for line in lines) if m]
if [int(m.group(1)) for m in steps] != list(range(1, 11)):
    fail.append(f"step lines: {[m.group(1) for m in steps]}, want 1..10")
else:
    for m, r in zip(steps, recs):
        if abs(float(m.group(2)) - r["loss"]) > 1e-6:
            fail.append(f"step {m.group(1)}: loss {m.group(2)}, metrics {r['loss']}")
        if (m.group(6) is None) != ("val_loss" not in r) or (
                m.group(6) and abs(float(m.group(6)) - r["val_loss"]) > 1e-6):
            fail.append(f"step {m.group(1)}: val {m.group(6)}, metrics {r.get('val_loss')}")
    elapsed = [seconds(m.group(3)) for m in steps]
    if elapsed != sorted(elapsed):
        fail.append(f"elapsed times go back: {elapsed}")
    if seconds(steps[-1].group(4)) != 0:
        fail.append(f"the last step's ETA is {steps[-1].group(4)}")

# The final summary.
m = one(lines, r"done: 10 steps \(1-10\), 5120 tokens in \S+; (\d+) tok/s mean over steps 2-10 "
        r"\(step 1, the warm-up, left out\)", "done")
if m:
    want = sum(512 for r in recs[1:]) / sum(r["step_ms"] / 1e3 for r in recs[1:])
    if abs(int(m.group(1)) - want) > 1 + 1e-4 * want:
        fail.append(f"mean tok/s {m.group(1)}, metrics give {want:.1f}")
vals = [(r["val_loss"], r["step"]) for r in recs if "val_loss" in r]
best = min(vals)
one(lines, rf"best val loss {best[0]:.6f} at step {best[1] + 1}/10", "best val loss")
one(lines, rf"peak memory per rank [\d.]+ [KMG]iB \(predicted {predicted}\)", "peak memory")
one(lines, re.escape(f"export: {work}/plain.safetensors"), "export path")
one(lines, re.escape(f"metrics: {work}/plain.jsonl"), "metrics path")
if any(line.startswith("checkpoint:") for line in lines):
    fail.append("a checkpoint line without checkpoints")

# --quiet: not a character, and the same run.
if log("quiet"):
    fail.append(f"--quiet printed {len(log('quiet'))} lines: {log('quiet')[:3]}")
if [r["loss"] for r in metrics("quiet")] != [r["loss"] for r in recs]:
    fail.append("--quiet changed the losses")
if not os.path.getsize(os.path.join(work, "quiet.safetensors")):
    fail.append("--quiet wrote no export")

# --log-every 3: the lines of steps 3, 6, 9, the evaluations' 4 and 8, and the last; the same
# losses as every step's.
logged = [m for m in (re.fullmatch(step_re, line) for line in log("logged")) if m]
if [int(m.group(1)) for m in logged] != [3, 4, 6, 8, 9, 10]:
    fail.append(f"--log-every 3: step lines {[m.group(1) for m in logged]}, want 3 4 6 8 9 10")
elif [m.group(2) for m in logged] != [steps[i - 1].group(2) for i in (3, 4, 6, 8, 9, 10)]:
    fail.append("--log-every 3: other losses than the run with every line")
if [r["step"] for r in metrics("logged")] != list(range(10)):
    fail.append("--log-every 3: the metrics do not hold every step")

# Two ranks: rank 0 alone prints, and says who shares the host's memory.
lines = log("two")
one(lines, r"shardtrain train: model tiny, .*", "two ranks: model")
one(lines, r"  mesh R x S x T = 1 x 2 x 1 \(2 ranks\), ZeRO stage 3, .*", "two ranks: mesh")
one(lines, r"  batch 512 tokens per step = micro-batch 4 x 64 tokens x 2 dp ranks x grad-accum 1; "
    r"10 steps = 5120 tokens", "two ranks: batch")
one(lines, r"  cpu memory: .*, shared by 2 ranks on this host; predicted use .*", "two ranks: memory")
one(lines, r"done: 10 steps .*", "two ranks: done")
if sum(line.startswith("step ") for line in lines) != 10:
    fail.append("two ranks: not 10 step lines")

# The steps' memory is the prediction, set-up's one-off buffers left out, checkpoint saves
# between the steps counted.
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def check_memory(name, categories):
    lines = log(name)
    m = one(lines, r"  memory per rank, predicted: (.*), total ([\d.]+) ([KMG]?i?B)",
            f"{name}: predicted")
    if not m:
        return
    predicted = {k: float(v) * UNITS[u] for k, v, u in re.findall(r"(\w+) ([\d.]+) ([KMG]?i?B)", m[1])}
    measured = metrics(name)[-1]["mem"]
    for k, v in measured.items() if categories else []:
        if abs(v - predicted.get(k, 0)) > 0.03 * max(v, predicted.get(k, 0)):
            fail.append(f"{name}: {k} peak {v} bytes, predicted {predicted.get(k, 0):.0f}")
    peak = one(lines, r"peak memory per rank ([\d.]+) ([KMG]iB) \(predicted ([\d.]+) ([KMG]iB)\)",
               f"{name}: peak memory")
    if peak:
        got, want = float(peak[1]) * UNITS[peak[2]], float(peak[3]) * UNITS[peak[4]]
        if abs(got - want) > 0.03 * want:
            fail.append(f"{name}: peak memory {peak[1]} {peak[2]}, predicted {peak[3]} {peak[4]}")


check_memory("wide", categories=True)
check_memory("wide_ckpt", categories=True)
check_memory("wide_async", categories=True)
check_memory("ckpt", categories=False)
check_memory("ckpt_end", categories=False)
if not any(line.startswith("[rank 0] info: checkpoint ") and "step_2:" in line
           for line in log("ckpt")):
    fail.append("ckpt: no checkpoint saved after step 2, before the steps measured")

# A count of 1 reads in the singular: one rank's checkpoint is 1 file, a one-step run 1 step.
one(log("ckpt"), r"\[rank 0\] info: checkpoint \S+/step_2: [\d.]+ MB in 1 file, .*", "ckpt: 1 file")
one(log("wide_ckpt"), r"\[rank 0\] info: checkpoint \S+/step_1: [\d.]+ MB in 2 files, .*",
    "wide_ckpt: 2 files")
one(log("one_step"), r"  batch 512 tokens per step = micro-batch 8 x 64 tokens x 1 dp rank x "
    r"grad-accum 1; 1 step = 512 tokens", "one step: batch")
one(log("one_step"), r"done: 1 step \(1-1\), 512 tokens in \S+; \d+ tok/s \(one step, warm-up "
    r"included\)", "one step: done")

# Oversubscribed threads are warned of once, by the node's first rank, with the count that fits;
# a run within the CPUs is not.
one(log("threads"), rf"\[rank 0\] warn: 2 ranks on this node each run up to {cpus + 1} OpenMP "
    rf"threads on the {cpus} CPUs they may use: their CPU work is oversubscribed; set "
    rf"OMP_NUM_THREADS={max(1, cpus // 2)} \(or bind each rank to its own cores\)", "threads")
if any("OpenMP threads" in line for line in log("threads") if not line.startswith("[rank 0]")):
    fail.append("threads: a rank other than the node's first warned of its threads")
if any("OpenMP threads" in line for line in log("two")):
    fail.append("two: warned of threads with OMP_NUM_THREADS=1")

# The optimizer flags reach AdamW.
base = [r["loss"] for r in metrics("base")]
if [r["loss"] for r in metrics("defaults")] != base:
    fail.append("the default betas and eps, given as flags, change the run")
for name, summary, same, differs in [("beta1", "beta1 0.5, beta2 0.95, eps 1e-08", 2, 2),
                                     ("beta2", "beta1 0.9, beta2 0.999, eps 1e-08", 2, 2),
                                     ("eps", "beta1 0.9, beta2 0.95, eps 0.001", 1, 1)]:
    losses = [r["loss"] for r in metrics(name)]
    one(log(name), rf"  AdamW: .*, {re.escape(summary)}, .*", f"--{name}: summary")
    if losses[:same] != base[:same]:
        fail.append(f"--{name} changed the losses before step {same}: {losses[:same]} {base[:same]}")
    if losses[differs] == base[differs]:
        fail.append(f"--{name} left step {differs}'s loss as it was: no effect on AdamW")

for f in fail:
    print("FAIL:", f)
print("report_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
