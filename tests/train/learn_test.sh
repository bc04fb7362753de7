#!/usr/bin/env bash
# `shardtrain train` learns: the tiny GPT trained for 400 steps on the byte-level fortunes
# corpus reaches a validation loss clearly below the unigram entropy of the validation data
# (what a model that ignores context at best achieves), and writes one well-formed metrics line
# per step and an export.
set -uo pipefail
# shardtrain starts MPI even on one rank: under --config=asan, leak detection is off for it as
# for every MPI program (see tests/mpirun.sh for why).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
shardtrain=$1
prepare=$2
work=${TEST_TMPDIR:-$(mktemp -d)}

python3 "$prepare" --out-dir "$work/data" > "$work/prepare.log" || { cat "$work/prepare.log"; exit 1; }
entropy=$(sed -n 's/^val unigram entropy: \([0-9.]*\) nats$/\1/p' "$work/prepare.log")
[ -n "$entropy" ] || { echo "FAIL: no entropy in prepare output"; cat "$work/prepare.log"; exit 1; }

"$shardtrain" train --model tiny --data-train "$work/data/bytes_train_*.bin" \
  --data-val "$work/data/bytes_val_*.bin" --steps 400 --micro-batch 16 --lr 3e-3 --warmup 20 \
  --min-lr 3e-4 --eval-every 100 --eval-batches 8 --metrics "$work/metrics.jsonl" \
  --export "$work/model.safetensors" > "$work/train.log" 2>&1
rc=$?
tail -3 "$work/train.log"
[ $rc -eq 0 ] || { echo "FAIL: train exited $rc"; cat "$work/train.log"; exit 1; }

python3 - "$work/metrics.jsonl" "$entropy" "$work/model.safetensors" <<'PY'
import json, os, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
entropy = float(sys.argv[2])
fail = []
if [l["step"] for l in lines] != list(range(400)):
    fail.append("metrics steps are not 0..399")
keys = {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms", "mem"}
if any(not keys <= set(l) for l in lines):
    fail.append("a metrics line lacks a field")
vals = [l["val_loss"] for l in lines if "val_loss" in l]
if len(vals) != 4:
    fail.append(f"expected 4 evaluations, got {len(vals)}")
if not vals or vals[-1] > entropy - 0.5:
    fail.append(f"final val loss {vals[-1] if vals else None} is not below entropy {entropy} - 0.5")
if os.path.getsize(sys.argv[3]) < 400_000:
    fail.append("export is missing or too small")
print(f"val losses {vals}, unigram entropy {entropy:.4f}")
for f in fail:
    print("FAIL:", f)
print("learn_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
