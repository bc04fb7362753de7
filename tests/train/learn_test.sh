#!/usr/bin/env bash
# `shardtrain train` learns: the tiny GPT trained for 400 steps on the byte-level fortunes
# corpus reaches a validation loss clearly below the unigram entropy of the validation data
# (what a model that ignores context at best achieves), and writes one well-formed metrics line
# per step and an export. The metrics must also be right in scale, which the loss alone does not
# show (clipping and Adam hide a gradient that is too large by a constant factor):
#   - "tokens" is exactly micro-batch x seq-len x dp (1) x grad-accum (1) x (step + 1);
#   - the grad norm, measured (OpenBLAS, one thread) at 2.58 at step 0, 10.8 at most (step 23,
#     just after warmup), 1.17 at most over steps 100-399 and 0.48 at the last step, stays in
#     [1.3, 5.2] at step 0 (a factor 2 either way: it depends only on the initial weights and
#     the first batch), below 30 at every step and below 3 from step 100 on. A loss scaled by a
#     wrong token count (say, without the sequence length: 64x) misses all three.
set -uo pipefail
# shardtrain starts MPI even on one rank: under --config=asan, leak detection is off for it as
# for every MPI program (see tests/mpirun.sh for why).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
shardtrain=$1
prepare=$2
work=${TEST_TMPDIR:-$(mktemp -d)}
micro=16
seq=64

python3 "$prepare" --out-dir "$work/data" > "$work/prepare.log" || { cat "$work/prepare.log"; exit 1; }
entropy=$(sed -n 's/^val unigram entropy: \([0-9.]*\) nats$/\1/p' "$work/prepare.log")
[ -n "$entropy" ] || { echo "FAIL: no entropy in prepare output"; cat "$work/prepare.log"; exit 1; }

"$shardtrain" train --model tiny --data-train "$work/data/bytes_train_*.bin" \
  --data-val "$work/data/bytes_val_*.bin" --steps 400 --micro-batch "$micro" --seq-len "$seq" \
  --lr 3e-3 --warmup 20 --min-lr 3e-4 --eval-every 100 --eval-batches 8 --metrics "$work/metrics.jsonl" \
  --export "$work/model.safetensors" > "$work/train.log" 2>&1
rc=$?
tail -3 "$work/train.log"
[ $rc -eq 0 ] || { echo "FAIL: train exited $rc"; cat "$work/train.log"; exit 1; }

python3 - "$work/metrics.jsonl" "$entropy" "$work/model.safetensors" "$micro" "$seq" <<'PY'
import json, os, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
entropy = float(sys.argv[2])
per_step = int(sys.argv[4]) * int(sys.argv[5])  # x dp 1 x grad-accum 1
fail = []
if [l["step"] for l in lines] != list(range(400)):
    fail.append("metrics steps are not 0..399")
keys = {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms", "mem"}
if any(not keys <= set(l) for l in lines):
    fail.append("a metrics line lacks a field")
    lines = []
for l in lines:
    if l["tokens"] != per_step * (l["step"] + 1):
        fail.append(f"step {l['step']}: tokens {l['tokens']}, "
                    f"expected {per_step * (l['step'] + 1)}")
        break
norms = [l["grad_norm"] if l["grad_norm"] is not None else float("inf") for l in lines]
if norms and not 1.3 <= norms[0] <= 5.2:
    fail.append(f"step 0 grad norm {norms[0]} is outside [1.3, 5.2] (measured 2.58)")
for bound, start in ((30.0, 0), (3.0, 100)):
    high = [(s, n) for s, n in enumerate(norms) if s >= start and not 0 < n <= bound]
    if high:
        fail.append(f"grad norm {high[0][1]} at step {high[0][0]} (and {len(high) - 1} more) is "
                    f"not in (0, {bound}] from step {start} on")
vals = [l["val_loss"] for l in lines if "val_loss" in l]
if len(vals) != 4:
    fail.append(f"expected 4 evaluations, got {len(vals)}")
if not vals or vals[-1] > entropy - 0.5:
    fail.append(f"final val loss {vals[-1] if vals else None} is not below entropy {entropy} - 0.5")
if os.path.getsize(sys.argv[3]) < 400_000:
    fail.append("export is missing or too small")
print(f"val losses {vals}, unigram entropy {entropy:.4f}")
if norms:
    print(f"grad norm: step 0 {norms[0]:.4g}, largest {max(norms):.4g}, largest from step 100 "
          f"{max(norms[100:], default=0):.4g}, last {norms[-1]:.4g}")
for f in fail:
    print("FAIL:", f)
print("learn_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
