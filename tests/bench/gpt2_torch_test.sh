#!/usr/bin/env bash
# gpt2_torch_test.sh - benchmarks/peers/gpt2_torch.py, the GPU benchmark's PyTorch peer, on the
# CPU (--device cpu), where PyTorch is importable; it prints SKIP and passes where it is not
# (CI installs no PyTorch). $GPT2_TORCH_PYTHON names a Python that has it (default python3):
#   bazel test //tests/bench:gpt2_torch_test --test_env=GPT2_TORCH_PYTHON=/path/to/venv/bin/python
#  - the model's parameters, the vocabulary's padding rows left out, are GPT-2's published
#    counts for d12-d48 (built on the meta device), and d12 at 16 positions has 1008 x 768 fewer;
#  - d12 at seq 16, 2 micro-batches a step, trains in the two systems gpu_bench.sh runs,
#    pytorch-compile and pytorch-fsdp2 (fully_shard over gloo at world 1, blocks compiled), and
#    in eager PyTorch: each prints a run record that bench_results.py's table reads, ok, tokens/s
#    above 0, no peak memory on a CPU; the first step's loss within 0.3 of ln(50304) (uniform
#    over the padded vocabulary; the initial logits' spread adds about 0.1), the last step's
#    more than 1 below it (the one batch memorised), and the compiled and the sharded runs'
#    losses within 0.05 of eager's (all in bf16);
#  - --device cuda with no usable GPU: a failed record, exit 1; out of memory (PyTorch's error,
#    or another error that quotes it): a "does not fit" record, exit 3;
#  - a bad argument: one line, exit 2.
set -uo pipefail
py=${GPT2_TORCH_PYTHON:-python3}
if ! "$py" -c "import torch" > /dev/null 2>&1; then
  echo "SKIP gpt2_torch_test: no PyTorch for $py"
  exit 0
fi
peer=benchmarks/peers/gpt2_torch.py
work=${TEST_TMPDIR:-$(mktemp -d)}
export TORCHINDUCTOR_CACHE_DIR=$work/inductor # compile here, not from another run's cache
# shellcheck source=tests/bench/checks.sh
. "$(dirname "$0")/checks.sh"

check "the parameter counts" "$py" - << 'PY'
import sys
import torch
sys.path.insert(0, "benchmarks/peers")
import gpt2_torch

def trained(model, seq_len):
    with torch.device("meta"):
        m = gpt2_torch.Gpt2(model, seq_len)
    padding = (m.vocab - 50257) * m.wte.weight.shape[1]
    return sum(p.numel() for p in m.parameters()) - padding

got = [trained(m, 1024) for m in ("d12", "d24", "d36", "d48")]
assert got == [124439808, 354823168, 774030080, 1557611200], got
assert trained("d12", 16) == 124439808 - 1008 * 768
PY

tiny=(--model d12 --device cpu --seq-len 16 --micro-batch 1 --batch-tokens 32 --warmup 1
  --steps 2)
: > "$work/runs.jsonl"
for run in "eager --no-compile" "compile" "fsdp2 --fsdp2"; do
  name=${run%% *}
  flags=()
  [ "$name" = "$run" ] || read -ra flags <<< "${run#* }"
  if "$py" "$peer" "${tiny[@]}" "${flags[@]}" > "$work/$name.log" 2>&1; then
    sed -n 's/^result //p' "$work/$name.log" >> "$work/runs.jsonl"
    echo "ok: $name: $(grep -m1 '^gpt2_torch.py: ' "$work/$name.log")"
  else
    echo "FAIL: the $name run:"; cat "$work/$name.log"; fail=1
  fi
done

check "the runs' records" python3 - "$work/runs.jsonl" << 'PY'
import json, math, re, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert [r["system"] for r in records] == ["pytorch-eager", "pytorch-compile", "pytorch-fsdp2"], \
    records
losses = []
for r in records:
    assert r["status"] == "ok" and r["tokens_per_s"] > 0 and r["peak_mem_bytes"] is None, r
    assert (r["model"], r["seq_len"], r["micro_batch"], r["grad_accum"]) == ("d12", 16, 1, 2), r
    m = re.fullmatch(r"2 timed steps after 1 warm-up, loss (\S+) at the first step, (\S+) at "
                     r"the last", r["note"])
    assert m, r["note"]
    first, last = float(m[1]), float(m[2])
    assert abs(first - math.log(50304)) < 0.3 and last < first - 1, r["note"]
    losses.append((first, last))
for first, last in losses[1:]:
    assert abs(first - losses[0][0]) < 0.05 and abs(last - losses[0][1]) < 0.05, losses
PY
check "bench_results.py reads the records" bash -c "python3 benchmarks/bench_results.py table \
  '$work/runs.jsonl' --csv '$work/bench.csv' > /dev/null && grep -c ',ok,1,2,16,' \
  '$work/bench.csv' | grep -qx 3"

if "$py" -c "import sys, torch; sys.exit(torch.cuda.is_available())"; then
  "$py" "$peer" --model d12 --seq-len 16 --micro-batch 1 --batch-tokens 16 > "$work/cuda.log" 2>&1
  rc=$?
  check "--device cuda without a GPU: a failed record, exit 1" bash -c "[ $rc -eq 1 ] &&
    grep -q '^result .*\"status\": \"failed\".*no CUDA device usable by PyTorch' '$work/cuda.log'"
fi

check "out of memory: 'does not fit', exit 3" "$py" - << 'PY'
import contextlib, io, json, sys
import torch
sys.path.insert(0, "benchmarks/peers")
import gpt2_torch

# torch's own error, and one that a compiler wraps (it keeps the message).
for error in (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
              RuntimeError("backend='inductor' raised: CUDA error: out of memory")):
    def measure(args, device, error=error):
        raise error
    gpt2_torch.measure = measure
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            gpt2_torch.main(["--model", "d48", "--micro-batch", "8", "--device", "cpu"])
        except SystemExit as e:
            code = e.code
    rec = json.loads(out.getvalue().splitlines()[-1][len("result "):])
    assert code == 3 and rec["status"] == "does not fit", (code, rec)
    assert rec["micro_batch"] == 8 and rec["grad_accum"] == 64, rec
PY

expect_error 2 "is not a multiple of --micro-batch 3" "$py" "$peer" --model d12 --seq-len 16 \
  --micro-batch 3 --batch-tokens 32
expect_error 2 "invalid choice: 'tpu'" "$py" "$peer" --model d12 --micro-batch 1 --device tpu
expect_error 2 "--seq-len 2048: must be in" "$py" "$peer" --model d12 --micro-batch 1 \
  --seq-len 2048

[ $fail -eq 0 ] && echo "gpt2_torch_test: passed" || echo "gpt2_torch_test: FAILED"
exit $fail
