#!/usr/bin/env bash
# train_gpu_test.sh (GPU) - the tiny GPT trained on the GPU against the CPU reference, one rank:
#   - fp32: the GPU's loss and gradient norm of each of 10 steps within 1e-5 (relative) of the
#     CPU's from the same seed (the same initial weights: they are drawn on the host);
#   - bf16 and fp16 (dynamic loss scaling) on the GPU: the loss after 50 steps within 1% of the
#     GPU's fp32 run, and different from it somewhere beyond 3e-5 (a run whose dtype flag was
#     ignored fails); fp16 reports its loss scale in every metrics line;
#   - bf16 parameters with fp32 gradients (the kernels accumulate the weight gradients in fp32,
#     --reduce-dtype fp32): the same bounds against fp32 after 50 steps, every metrics line
#     naming bf16/fp32, and the test prints how far bf16/bf16 and bf16/fp32 each end from fp32;
#   - activation recompute on the GPU: in fp32, --recompute gelu and block give the losses and
#     grad norms of --recompute none bit for bit (the fp32 GELU is one kernel in the forward and
#     the recompute alike); in bf16 the loss after 50 steps within 1e-3 of none's (the forward's
#     GELU epilogue computes from the fp32 product, the recompute from the stored bf16
#     pre-activation), and the test prints whether bf16 stayed bitwise.
# Prints SKIP and passes where no GPU is usable (no nvidia-smi, or `--device cuda` refused).
#   train_gpu_test.sh SHARDTRAIN PREPARE_BYTES MPIRUN_SH
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "SKIP train_gpu_test: no GPU"; exit 0
fi
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/../train/train_runs.sh"

probe=$("$shardtrain" train --model tiny --steps 0 --device cuda \
  --data-train "$work/data/bytes_train_*.bin" 2>&1) || {
  echo "SKIP train_gpu_test: --device cuda refused: $probe"; exit 0
}

run cpu_fp32 1 --device cpu --micro-batch 12
run gpu_fp32 1 --device cuda --micro-batch 12
long=(--steps 50 --micro-batch 12 --device cuda)
run gpu_fp32_50 1 "${long[@]}"
run gpu_bf16_50 1 "${long[@]}" --param-dtype bf16 --reduce-dtype bf16
run gpu_fp16_50 1 "${long[@]}" --param-dtype fp16 --reduce-dtype fp16
run gpu_bf16_fp32g_50 1 "${long[@]}" --param-dtype bf16 --reduce-dtype fp32
for mode in gelu block; do
  run "gpu_fp32_$mode" 1 --device cuda --micro-batch 12 --recompute "$mode"
  run "gpu_bf16_50_$mode" 1 "${long[@]}" --param-dtype bf16 --reduce-dtype bf16 --recompute "$mode"
done

PYTHONPATH="$(dirname "$0")/../train" python3 - "$work" <<'PY'
import sys
from run_outputs import metrics
work = sys.argv[1]
fail = []
cpu, gpu = metrics(work, "cpu_fp32"), metrics(work, "gpu_fp32")
if len(cpu) != 10 or len(gpu) != 10:
    fail.append(f"fp32 runs have {len(cpu)} (cpu) and {len(gpu)} (gpu) steps, expected 10")
worst = 0.0
for a, b in zip(gpu, cpu):
    for key in ("loss", "grad_norm"):
        rel = abs(a[key] - b[key]) / abs(b[key])
        worst = max(worst, rel)
        if rel > 1e-5:
            fail.append(f"fp32 step {a['step']} {key}: gpu {a[key]!r} vs cpu {b[key]!r}")
print(f"fp32 gpu vs cpu over 10 steps: worst relative difference {worst:.2e}")
ref = metrics(work, "gpu_fp32_50")
for name in ("gpu_bf16_50", "gpu_fp16_50", "gpu_bf16_fp32g_50"):
    rows = metrics(work, name)
    if len(rows) != len(ref) or len(ref) != 50:
        fail.append(f"{name}: {len(rows)} steps against {len(ref)}, expected 50"); continue
    final = abs(rows[-1]["loss"] - ref[-1]["loss"]) / ref[-1]["loss"]
    apart = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(rows, ref))
    print(f"{name}: final loss {rows[-1]['loss']:.5f} vs fp32 {ref[-1]['loss']:.5f} "
          f"({final:.2e} relative), largest step difference {apart:.2e}")
    if final > 1e-2:
        fail.append(f"{name}: final loss {final:.2e} away from fp32 (bound 1e-2)")
    if apart < 3e-5:
        fail.append(f"{name}: never differs from fp32 beyond 3e-5: was the dtype used?")
for mode in ("gelu", "block"):
    got = [(r["loss"], r["grad_norm"]) for r in metrics(work, f"gpu_fp32_{mode}")]
    if got != [(r["loss"], r["grad_norm"]) for r in gpu]:
        fail.append(f"fp32 --recompute {mode}: losses or grad norms differ from none's")
    rows, base = metrics(work, f"gpu_bf16_50_{mode}"), metrics(work, "gpu_bf16_50")
    final = abs(rows[-1]["loss"] - base[-1]["loss"]) / base[-1]["loss"]
    same = [r["loss"] for r in rows] == [r["loss"] for r in base]
    print(f"bf16 --recompute {mode}: final loss {final:.2e} from none's; bitwise: {same}")
    if final > 1e-3:
        fail.append(f"bf16 --recompute {mode}: final loss {final:.2e} away from none's (bound 1e-3)")
if any(r["dtypes"] != {"param": "bf16", "reduce": "fp32"} for r in metrics(work, "gpu_bf16_fp32g_50")):
    fail.append("gpu_bf16_fp32g_50: a metrics line does not name bf16 params with fp32 gradients")
if not all("loss_scale" in r for r in metrics(work, "gpu_fp16_50")):
    fail.append("gpu_fp16_50: a metrics line lacks loss_scale")
for f in fail: print("FAIL:", f)
print("train_gpu_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
