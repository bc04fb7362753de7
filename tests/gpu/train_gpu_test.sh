#!/usr/bin/env bash
# train_gpu_test.sh (GPU) - the tiny GPT trained on the GPU against the CPU reference, one rank:
#   - fp32: the GPU's loss and gradient norm of each of 10 steps within 1e-5 (relative) of the
#     CPU's from the same seed (the same initial weights: they are drawn on the host), 2
#     micro-batches a step, and so the validation loss of 3 batches at steps 5 and 10;
#   - bf16 and fp16 (dynamic loss scaling) on the GPU: the loss after 50 steps within 1% of the
#     GPU's fp32 run, and different from it somewhere beyond 3e-5 (a run whose dtype flag was
#     ignored fails); fp16 reports its loss scale in every metrics line;
#   - an fp16 overflow injected on rank 1 of 2 at step 4 (ST_TEST_INJECT_OVERFLOW=4:1, fp16 at
#     ZeRO-3 over 2 ranks sharing the GPU): every rank skips that step ("skipped" 2 there and 0
#     elsewhere, its grad_norm null) and the dynamic scale halves from the next step on;
#   - bf16 parameters with fp32 gradients (the kernels accumulate the weight gradients in fp32,
#     --reduce-dtype fp32): the same bounds against fp32 after 50 steps, every metrics line
#     naming bf16/fp32, and the test prints how far bf16/bf16 and bf16/fp32 each end from fp32;
#   - activation recompute on the GPU: in fp32, --recompute gelu and block give the losses and
#     grad norms of --recompute none bit for bit (the fp32 GELU is one kernel in the forward and
#     the recompute alike); in bf16 the loss after 50 steps within 1e-3 of none's (the forward's
#     GELU epilogue computes from the fp32 product, the recompute from the stored bf16
#     pre-activation), and the test prints whether bf16 stayed bitwise;
#   - the optimizer offloaded to the host (--offload optimizer; the tiny model's units are
#     smaller than a chunk, so the ring of staging slots holds several units at once): in fp32
#     each step's loss and gradient norm within 1e-5 (relative) of the resident GPU run's, the
#     first step's loss equal; in bf16 the loss after 50 steps within 1e-3 of the resident
#     run's; the device's memory that of the resident run less its optimizer, the host's
#     optimizer_host the resident optimizer plus a staging of 4 equal slots of at most 2^20
#     elements, and within 1% of the planner's prediction printed at start-up.
# Prints SKIP and passes where no GPU is usable (`--device cuda` refused for want of one); the
# CUDA emulation (tools/cuda_emu) counts as one. Any other refusal (a loader error, a crash)
# fails, and so does the SKIP where ST_TEST_REQUIRE_GPU=1 (the GPU suite). Under the suite's
# TRAIN_RUN_KEEP_GOING=1 (tests/train/train_runs.sh) a failed run leaves out only the checks
# that need it.
#   train_gpu_test.sh SHARDTRAIN PREPARE_BYTES MPIRUN_SH
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/../train/train_runs.sh"

# The probe's 120 s are cut to what is left before TRAIN_RUN_DEADLINE (the GPU suite), so the
# script still reaches its checks inside the suite's bound; waited for in the background, as the
# runs are (train_runs.sh), so a TERM to the script ends it at once.
probe_secs=120
if [ -n "${TRAIN_RUN_DEADLINE:-}" ] && [ $((TRAIN_RUN_DEADLINE - $(date +%s))) -lt "$probe_secs" ]
then
  probe_secs=$((TRAIN_RUN_DEADLINE - $(date +%s)))
fi
if [ "$probe_secs" -le 0 ]; then
  echo "FAIL train_gpu_test: the --device cuda probe not started: past TRAIN_RUN_DEADLINE"
  exit 1
fi
timeout -k 5 "$probe_secs" "$shardtrain" train --model tiny --steps 0 --device cuda \
  --data-train "$work/data/bytes_train_*.bin" > "$work/probe.log" 2>&1 &
train_run_pid=$!
wait "$train_run_pid"
probe_rc=$?
train_run_pid=
probe=$(cat "$work/probe.log")
if [ "$probe_rc" -ne 0 ]; then
  if grep -q "no usable GPU" <<< "$probe" && [ "${ST_TEST_REQUIRE_GPU:-0}" != 1 ]; then
    echo "SKIP train_gpu_test: --device cuda refused: $probe"; exit 0
  fi
  echo "FAIL train_gpu_test: --device cuda refused (exit $probe_rc): $(tail -c 1500 <<< "$probe")"
  exit 1
fi

# With 2 micro-batches a step and an evaluation of 3 batches every 5 steps: the uploads read the
# pinned token slots asynchronously, and the evaluation refills them in turn (cmd_train.c).
evals=(--grad-accum 2 --data-val "$work/data/bytes_val_*.bin" --eval-every 5 --eval-batches 3)
run cpu_fp32 1 --device cpu --micro-batch 12 "${evals[@]}"
run gpu_fp32 1 --device cuda --micro-batch 12 "${evals[@]}"
long=(--steps 50 --micro-batch 12 --device cuda)
run gpu_fp32_50 1 "${long[@]}"
run gpu_bf16_50 1 "${long[@]}" --param-dtype bf16 --reduce-dtype bf16
run gpu_fp16_50 1 "${long[@]}" --param-dtype fp16 --reduce-dtype fp16
run gpu_bf16_fp32g_50 1 "${long[@]}" --param-dtype bf16 --reduce-dtype fp32
run gpu_fp32_offload 1 --device cuda --micro-batch 12 --offload optimizer
run gpu_bf16_50_offload 1 "${long[@]}" --param-dtype bf16 --reduce-dtype bf16 --offload optimizer
ST_TEST_INJECT_OVERFLOW=4:1 run gpu_fp16_overflow 2 --device cuda --micro-batch 6 \
  --dp-shard 2 --zero 3 --param-dtype fp16 --reduce-dtype fp16
for mode in gelu block; do
  run "gpu_fp32_$mode" 1 --device cuda --micro-batch 12 --recompute "$mode"
  run "gpu_bf16_50_$mode" 1 "${long[@]}" --param-dtype bf16 --reduce-dtype bf16 --recompute "$mode"
done

PYTHONPATH="$(dirname "$0")/../train" python3 - "$work" ${runs_failed[@]+"${runs_failed[@]}"} <<'PY'
import re
import sys
from run_outputs import metrics as read_metrics
work, failed_runs = sys.argv[1], set(sys.argv[2:])
fail = []


class RunFailed(Exception):
    pass


def metrics(work, name):
    if name in failed_runs:
        raise RunFailed(name)
    return read_metrics(work, name)


def checked(what, body):
    """Runs one group of checks; a run it needs that failed (TRAIN_RUN_KEEP_GOING) leaves the
    group out, and any other error fails it, so the groups after it still run."""
    try:
        body()
    except RunFailed as e:
        print(f"{what}: not checked, run {e} failed")
    except Exception as e:  # noqa: BLE001 - reported as the group's failure
        fail.append(f"{what}: {type(e).__name__}: {e}")


def fp32_against_cpu():
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
    evaluated = [(a, b) for a, b in zip(gpu, cpu) if "val_loss" in b]
    if len(evaluated) != 2 or any("val_loss" not in a for a, _ in evaluated):
        fail.append(f"fp32 runs: validation losses at steps {[b['step'] for _, b in evaluated]} "
                    "(cpu), expected at steps 5 and 10 on both")
    for a, b in evaluated:
        rel = abs(a["val_loss"] - b["val_loss"]) / abs(b["val_loss"])
        worst = max(worst, rel)
        if rel > 1e-5:
            fail.append(f"fp32 step {a['step']} val_loss: gpu {a['val_loss']!r} vs cpu "
                        f"{b['val_loss']!r}")
    print(f"fp32 gpu vs cpu over 10 steps, validation included: worst relative difference "
          f"{worst:.2e}")


def low_precision(name):
    ref = metrics(work, "gpu_fp32_50")
    rows = metrics(work, name)
    if len(rows) != len(ref) or len(ref) != 50:
        fail.append(f"{name}: {len(rows)} steps against {len(ref)}, expected 50")
        return
    final = abs(rows[-1]["loss"] - ref[-1]["loss"]) / ref[-1]["loss"]
    apart = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(rows, ref))
    print(f"{name}: final loss {rows[-1]['loss']:.5f} vs fp32 {ref[-1]['loss']:.5f} "
          f"({final:.2e} relative), largest step difference {apart:.2e}")
    if final > 1e-2:
        fail.append(f"{name}: final loss {final:.2e} away from fp32 (bound 1e-2)")
    if apart < 3e-5:
        fail.append(f"{name}: never differs from fp32 beyond 3e-5: was the dtype used?")


def recompute_fp32(mode):
    gpu = metrics(work, "gpu_fp32")
    got = [(r["loss"], r["grad_norm"]) for r in metrics(work, f"gpu_fp32_{mode}")]
    if got != [(r["loss"], r["grad_norm"]) for r in gpu]:
        fail.append(f"fp32 --recompute {mode}: losses or grad norms differ from none's")


def recompute_bf16(mode):
    rows, base = metrics(work, f"gpu_bf16_50_{mode}"), metrics(work, "gpu_bf16_50")
    final = abs(rows[-1]["loss"] - base[-1]["loss"]) / base[-1]["loss"]
    same = [r["loss"] for r in rows] == [r["loss"] for r in base]
    print(f"bf16 --recompute {mode}: final loss {final:.2e} from none's; bitwise: {same}")
    if final > 1e-3:
        fail.append(f"bf16 --recompute {mode}: final loss {final:.2e} away from none's "
                    "(bound 1e-3)")


def offload_fp32():
    gpu = metrics(work, "gpu_fp32")
    rows = metrics(work, "gpu_fp32_offload")
    if [r["step"] for r in rows] != [r["step"] for r in gpu] or rows[0]["loss"] != gpu[0]["loss"]:
        fail.append("fp32 --offload optimizer: other steps, or another first loss, than resident")
    for a, b in zip(rows, gpu):
        for key in ("loss", "grad_norm"):
            if abs(a[key] - b[key]) > 1e-5 * abs(b[key]):
                fail.append(f"fp32 --offload optimizer step {a['step']} {key}: {a[key]!r} vs "
                            f"{b[key]!r}")
    off, res = rows[-1]["mem"], gpu[-1]["mem"]
    staging = off["optimizer_host"] - res["optimizer"]
    print(f"fp32 --offload optimizer: optimizer_host {off['optimizer_host']} bytes, "
          f"staging {staging}")
    # Equal but for the optimizer; the workspace may also hold the pipeline's chunk table on the
    # host (tens of bytes a chunk and segment, under 64 KiB here) if it lands above the step's
    # peak.
    exact = [k for k in res if k not in ("optimizer", "optimizer_host", "workspace")]
    if any(off[k] != res[k] for k in exact) or off["optimizer"] or \
            not 0 <= off["workspace"] - res["workspace"] <= 65536:
        fail.append(f"fp32 --offload optimizer: device memory {off} against resident {res}")
    if not (0 < staging <= 4 * 2**20 * 8 and staging % (4 * 8) == 0):
        fail.append(f"fp32 --offload optimizer: staging of {staging} bytes is not 4 slots of "
                    "<= 2^20")
    with open(f"{work}/gpu_fp32_offload.log") as f:
        found = re.search(r"optimizer_host ([0-9.]+) (B|KiB|MiB|GiB)", f.read())
    if not found:
        fail.append("fp32 --offload optimizer: no optimizer_host prediction in the log")
    else:
        predicted = float(found[1]) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[found[2]]
        if abs(predicted - off["optimizer_host"]) > 0.01 * off["optimizer_host"]:
            fail.append(f"fp32 --offload optimizer: optimizer_host {off['optimizer_host']} bytes, "
                        f"predicted {predicted:.0f}")


def offload_bf16():
    rows, base = metrics(work, "gpu_bf16_50_offload"), metrics(work, "gpu_bf16_50")
    final = abs(rows[-1]["loss"] - base[-1]["loss"]) / base[-1]["loss"]
    same = [r["loss"] for r in rows] == [r["loss"] for r in base]
    print(f"bf16 --offload optimizer: final loss {final:.2e} from resident; bitwise: {same}")
    if len(rows) != 50 or final > 1e-3:
        fail.append(f"bf16 --offload optimizer: {len(rows)} steps, final loss {final:.2e} away")


def metrics_lines():
    if any(r["dtypes"] != {"param": "bf16", "reduce": "fp32"}
           for r in metrics(work, "gpu_bf16_fp32g_50")):
        fail.append("gpu_bf16_fp32g_50: a metrics line does not name bf16 params with fp32 "
                    "gradients")
    if not all("loss_scale" in r for r in metrics(work, "gpu_fp16_50")):
        fail.append("gpu_fp16_50: a metrics line lacks loss_scale")


def overflow():
    rows = metrics(work, "gpu_fp16_overflow")
    skipped = [r["skipped"] for r in rows]
    scales = [r["loss_scale"] for r in rows]
    print(f"fp16 overflow injected on rank 1 at step 4: skipped {skipped}, scales {scales}")
    if skipped != [2 if r["step"] == 4 else 0 for r in rows] or len(rows) != 10:
        fail.append(f"gpu_fp16_overflow: skipped per step {skipped}, expected 2 at step 4 only")
    elif rows[4]["grad_norm"] is not None:
        fail.append(f"gpu_fp16_overflow: the skipped step reports grad_norm {rows[4]['grad_norm']}")
    if scales != [scales[0] if r["step"] <= 4 else scales[0] / 2 for r in rows]:
        fail.append(f"gpu_fp16_overflow: loss scales {scales}, expected a halving after step 4")


checked("fp32 gpu vs cpu", fp32_against_cpu)
checked("fp16 overflow on every rank", overflow)
for name in ("gpu_bf16_50", "gpu_fp16_50", "gpu_bf16_fp32g_50"):
    checked(name, lambda n=name: low_precision(n))
for mode in ("gelu", "block"):
    checked(f"fp32 --recompute {mode}", lambda m=mode: recompute_fp32(m))
    checked(f"bf16 --recompute {mode}", lambda m=mode: recompute_bf16(m))
checked("fp32 --offload optimizer", offload_fp32)
checked("bf16 --offload optimizer", offload_bf16)
checked("metrics lines", metrics_lines)
for f in fail: print("FAIL:", f)
print("train_gpu_test:", "FAILED" if fail or failed_runs else "passed")
sys.exit(1 if fail or failed_runs else 0)
PY
