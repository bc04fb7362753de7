#!/usr/bin/env bash
# --offload optimizer moves the fp32 master weights and Adam's moments to host memory and runs
# AdamW there; on the CPU the result must not change by a bit. The tiny GPT trains 10 steps at
# every ZeRO stage on dp-shard 2 and on tp 2 x dp-shard 2 (4 ranks), in fp32, and at stage 3 in
# bf16, with and without offload. Checked:
#   - each step's loss and gradient norm are the same strings in the metrics, and the exports
#     (gathered from the host-resident master weights) the same bytes;
#   - the memory moves: the offloaded runs' "optimizer" peak is 0 and their "optimizer_host"
#     peak is the other runs' "optimizer" peak;
#   - checkpoints read and write the host-resident state: the rank files of an offloaded run's
#     checkpoint are byte-identical to a resident run's, and resuming it at step 5, offloaded or
#     not, gives the uninterrupted run's last five steps and export, bit for bit.
set -uo pipefail
shardtrain=$1
prepare=$2
mpirun_sh=$3
# shellcheck source=tests/train/train_runs.sh
. "$(dirname "$0")/train_runs.sh"

pairs=()
meshes=("s2 2 6 --dp-shard 2" "tp2s2 4 6 --tp 2 --dp-shard 2")
for m in "${meshes[@]}"; do
  read -r mesh ranks micro flags <<<"$m"
  for z in 0 1 2 3; do
    # shellcheck disable=SC2086 # the mesh flags are words on purpose
    run "${mesh}_z$z" "$ranks" $flags --micro-batch "$micro" --zero "$z"
    # shellcheck disable=SC2086
    run "${mesh}_z${z}_off" "$ranks" $flags --micro-batch "$micro" --zero "$z" --offload optimizer
    pairs+=("${mesh}_z$z")
  done
done
bf16=(--dp-shard 2 --micro-batch 6 --zero 3 --param-dtype bf16 --reduce-dtype bf16)
run bf16_s2_z3 2 "${bf16[@]}"
run bf16_s2_z3_off 2 "${bf16[@]}" --offload optimizer
pairs+=(bf16_s2_z3)

# Checkpoints: saved offloaded and resident; resumed at step 5 offloaded and resident.
ckpt=(--dp-shard 2 --micro-batch 6 --zero 2 --ckpt-every 5)
run ck 2 "${ckpt[@]}" --ckpt-dir "$work/ck"
run ck_off 2 "${ckpt[@]}" --ckpt-dir "$work/ck_off" --offload optimizer
run resume_off 2 "${ckpt[@]}" --ckpt-dir "$work/resume_off" --offload optimizer \
  --resume-from "$work/ck_off/step_5"
run resume_plain 2 "${ckpt[@]}" --ckpt-dir "$work/resume_plain" --resume-from "$work/ck_off/step_5"
for step in step_5 step_10; do
  for f in "$work/ck/$step"/rank_*.safetensors; do
    cmp -s "$f" "$work/ck_off/$step/$(basename "$f")" || {
      echo "FAIL: the offloaded run's $step/$(basename "$f") differs from the resident run's"
      exit 1
    }
  done
done
echo "ok: offloaded checkpoints are byte-identical to resident ones"

PYTHONPATH="$(dirname "$0")" python3 - "$work" "${pairs[@]}" <<'PY'
import json, os, re, sys
from run_outputs import same_export
work, pairs = sys.argv[1], sys.argv[2:]
fail = []

def raw(name, key):
    """Each step's value of `key` exactly as the metrics line prints it."""
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [re.search(r'"%s": ([^,}]+)' % key, line).group(1) for line in f]

def mem(name):
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [json.loads(line)["mem"] for line in f]

for base in pairs:
    off = base + "_off"
    for key in ("loss", "grad_norm"):
        a, b = raw(base, key), raw(off, key)
        if len(a) != 10 or a != b:
            fail.append(f"{off}: {key} {b} differs from {base}: {a}")
    if not same_export(work, base, off):
        fail.append(f"{off}: export differs from {base}")
    for step, (a, b) in enumerate(zip(mem(base), mem(off))):
        if b["optimizer"] != 0 or b["optimizer_host"] != a["optimizer"] or a["optimizer_host"]:
            fail.append(f"{off} step {step}: optimizer {b['optimizer']}, optimizer_host "
                        f"{b['optimizer_host']}; resident: optimizer {a['optimizer']}")
            break

for resumed in ("resume_off", "resume_plain"):
    for key in ("loss", "grad_norm"):
        a, b = raw("ck", key)[5:], raw(resumed, key)
        if a != b:
            fail.append(f"{resumed}: {key} {b} differs from the uninterrupted run's {a}")
    if not same_export(work, "ck", resumed):
        fail.append(f"{resumed}: export differs from the uninterrupted run's")
for a, b in (("ck", "ck_off"),):
    if raw(a, "loss") != raw(b, "loss") or not same_export(work, a, b):
        fail.append(f"{b} differs from {a}")

print(f"{len(pairs)} offloaded runs and 2 resumed runs compared bit for bit")
for f in fail: print("FAIL:", f)
print("offload_test:", "FAILED" if fail else "passed")
sys.exit(1 if fail else 0)
PY
