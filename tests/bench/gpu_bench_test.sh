#!/usr/bin/env bash
# The GPU benchmark's parts that run without a GPU (benchmarks/gpu_bench.sh, docs/PERFORMANCE.md):
#  - bench_common.py: GPT-2's published parameter counts, 6N + 6LCT worked out by hand for d12
#    and d48; the trainer's own MFU (--peak-tflops, C code) of a real run equals the one its
#    benchmark record gives (below);
#  - bench_results.py: hand-made run records (two partial runs, a failed try replaced by a later
#    one) give the hand-checked table (expected_bench.csv: MFU, GiB, order); a hand-made metrics
#    file gives the tokens over the summed step times of the steps after the warm-up (4000, not
#    the mean of the rates) and the largest sum of category peaks; a real CPU run of shardtrain on
#    random_tokens.py's shard gives an ok record;
#  - kernel_table.py: a hand-made ncu profile of two steps gives the last step's rows as worked out
#    by hand (shares, TFLOP/s with the calibration GEMM's 2 FLOPs per counted op, GB/s, limits),
#    and the whole profile when no step boundary is found;
#  - plot_bench.py draws a valid PNG of the table;
#  - gpu_bench.sh without a GPU (the real `ceilings` prints SKIP): one line, exit 1; without a
#    bundle or with a bad flag: one line, exit 2; with stand-in ceilings, every run fails (no GPU,
#    no PyTorch here) and becomes a row of the table, exit 0, and with ST_CUDA_ATTENTION=flash
#    shardtrain's rows are named after it; a stand-in shardtrain that succeeds but warns that
#    the flash kernels ran instead of cuDNN's gives a failed -cudnn row quoting the warning;
#    a stand-in PyTorch peer gets the library path from before the bundle's env.sh;
#  - ceilings prints SKIP and exits 0 here, and a bad flag is one line and exit 2;
#  - peers/gpt2_torch.py compiles (tests/bench:gpt2_torch_test runs it where PyTorch is).
# Bad input to each script: one error line, exit 2.
set -uo pipefail
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # shardtrain starts MPI
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
shardtrain=$1 ceilings=$2 plot=$3 valid_png=$4
fixtures=tests/bench
work=${TEST_TMPDIR:-$(mktemp -d)}
unset DISPLAY
# shellcheck source=tests/bench/checks.sh
. "$(dirname "$0")/checks.sh"

check "bench_common: shapes and FLOPs" python3 - << 'PY'
import sys
sys.path.insert(0, "benchmarks")
import bench_common as m
# GPT-2 small, medium, large and XL as published (padding rows of the vocabulary left out).
assert [m.parameters(n) for n in ("d12", "d24", "d36", "d48")] == \
    [124439808, 354823168, 774030080, 1557611200]
# 6N + 6LCT: d12 6 * 124439808 + 6 * 12 * 768 * 1024 = 746638848 + 56623104.
assert m.flops_per_token("d12", 1024) == 803261952
# d48: 6 * 1557611200 + 6 * 48 * 1600 * 1024 = 9345667200 + 471859200.
assert m.flops_per_token("d48", 1024) == 9817526400
assert abs(m.mfu(1e5, "d12", 1024) - 1e5 * 803261952 / 989e12) < 1e-15
assert m.padded_vocab() == 50304
PY

python3 benchmarks/bench_results.py table "$fixtures/runs_two_parts.jsonl" --csv "$work/bench.csv" \
  > "$work/table.txt"
check "bench_results: table CSV as worked out by hand" diff "$fixtures/expected_bench.csv" \
  "$work/bench.csv"
check "bench_results: the printed table" grep -qE \
  '^d12 +124\.4 +shardtrain-zero0 +ok +16 +32 +400000 +32\.5 +20\.00 ' "$work/table.txt"

check "bench_results: a metrics file's record" python3 - << 'PY'
import json, subprocess
out = subprocess.run(["python3", "benchmarks/bench_results.py", "shardtrain",
                      "tests/bench/metrics_three_steps.jsonl", "--warmup", "1", "--system",
                      "shardtrain-zero0", "--model", "d12", "--seq-len", "1024"],
                     check=True, capture_output=True, text=True).stdout
assert out.startswith("result "), out
rec = json.loads(out[len("result "):])
# steps 1 and 2: 1000 tokens each (5000 tok/s x 0.2 s, 3333.33 x 0.3 s) over 0.5 s.
assert abs(rec["tokens_per_s"] - 4000) < 1e-3, rec
assert rec["peak_mem_bytes"] == 300 and rec["status"] == "ok", rec
PY

python3 benchmarks/random_tokens.py "$work/random.bin" --tokens 20000 --vocab 256 > /dev/null
"$shardtrain" train --model tiny --data-train "$work/random.bin" --steps 3 --micro-batch 4 \
  --grad-accum 2 --quiet --metrics "$work/real.jsonl" > "$work/real.log" 2>&1 ||
  { echo "FAIL: the CPU training run:"; cat "$work/real.log"; fail=1; }
check "bench_results: a real run's record" python3 - "$work/real.jsonl" << 'PY'
import json, subprocess, sys
out = subprocess.run(["python3", "benchmarks/bench_results.py", "shardtrain", sys.argv[1],
                      "--warmup", "1", "--system", "shardtrain-zero0", "--model", "d12",
                      "--seq-len", "64"], check=True, capture_output=True, text=True).stdout
rec = json.loads(out[len("result "):])
assert rec["status"] == "ok" and rec["tokens_per_s"] > 0 and rec["peak_mem_bytes"] > 0, rec
assert rec["note"] == "2 timed steps after 1 warm-up", rec
PY
# The trainer's own MFU (C code, --peak-tflops 989) of d12, short sequences so that it runs on a
# CPU in seconds, is the benchmark's for the same tokens/s.
python3 benchmarks/random_tokens.py "$work/random50k.bin" --tokens 20000 > /dev/null
"$shardtrain" train --model d12 --seq-len 16 --micro-batch 1 --steps 2 --peak-tflops 989 \
  --data-train "$work/random50k.bin" --quiet --metrics "$work/d12.jsonl" > "$work/d12.log" 2>&1 ||
  { echo "FAIL: the d12 CPU run:"; cat "$work/d12.log"; fail=1; }
check "bench_common: the trainer's MFU" python3 - "$work/d12.jsonl" << 'PY'
import json, sys
sys.path.insert(0, "benchmarks")
import bench_common
for line in open(sys.argv[1]):
    step = json.loads(line)
    ours = bench_common.mfu(step["tokens_per_s"], "d12", 16)
    assert abs(ours / step["mfu"] - 1) < 1e-6, (step["mfu"], ours)
PY
check "random_tokens: every token below the vocabulary, not all alike" \
  python3 - "$work/random.bin" << 'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
magic, version, n = struct.unpack("<3i", data[:12])
tokens = struct.unpack(f"<{n}H", data[1024:])
assert (magic, version, n, len(data)) == (20240520, 1, 20000, 1024 + 40000)
assert max(tokens) < 256 and len(set(tokens)) == 256
PY

python3 benchmarks/kernel_table.py "$fixtures/ncu_two_steps.csv" \
  --ceilings "$fixtures/ceilings.txt" --calibration "$fixtures/ncu_gemm_once.csv" \
  --calibration-flops 2e9 --cluster-gap 2 --csv "$work/kernels.csv" > "$work/kernels.txt"
check "kernel_table: the last step as worked out by hand" python3 - "$work/kernels.csv" << 'PY'
import csv, sys
rows = {r["kernel"]: r for r in csv.DictReader(open(sys.argv[1]))}
want = {  # kernel: calls, ms, share, TFLOP/s, GB/s, limit (steps 5-10 of the fixture)
    "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN": (2, 0.2, 2 / 3, 400, 600, "compute"),
    "attention_forward_kernel": (1, 0.08, 0.08 / 0.3, 37.5, 150, "latency"),
    "embedding_forward_kernel": (1, 0.01, 0.01 / 0.3, 0, 3000, "memory"),
    "adamw_kernel": (2, 0.01, 0.01 / 0.3, 0.4, 3000, "memory"),
}
assert set(rows) == set(want), sorted(rows)
assert list(rows)[0] == "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN"
for name, (calls, ms, share, tflops, gbps, limit) in want.items():
    r = rows[name]
    got = (int(r["calls"]), float(r["time_ms"]), float(r["share"]), float(r["tflops"]),
           float(r["gbps"]), r["limit"])
    assert got[0] == calls and got[5] == limit, (name, got)
    for g, w in zip(got[1:5], (ms, share, tflops, gbps)):
        assert abs(g - w) <= 1e-5 * max(1, abs(w)), (name, got)
    assert abs(float(r["of_gemm"]) - tflops / 800) < 1e-6 and \
        abs(float(r["of_copy"]) - gbps / 3000) < 1e-6, (name, r)
PY
check "kernel_table: heading of the last step" grep -q \
  '^the last step: 6 launches, 0.300 ms of kernel time; ceilings 800 TFLOP/s' "$work/kernels.txt"
check "kernel_table: no boundary, the whole profile" bash -c "python3 benchmarks/kernel_table.py \
  $fixtures/ncu_two_steps.csv --ceilings $fixtures/ceilings.txt | grep -q \
  '^the whole profile (no step boundary found): 11 launches, 1.420 ms'"

sed 's/"1,000,000,000","0","0","0"$/"0","0","0","0"/' "$fixtures/ncu_gemm_once.csv" \
  > "$work/no_ops.csv"
check "kernel_table: a calibration without tensor operations, no FLOP/s" bash -c "python3 \
  benchmarks/kernel_table.py $fixtures/ncu_two_steps.csv --ceilings $fixtures/ceilings.txt \
  --calibration $work/no_ops.csv --calibration-flops 2e9 --cluster-gap 2 2> /dev/null |
  grep -q '^the last step: .*; no FLOP/s'"

check "plot_bench: a valid PNG" "$plot" "$work/bench.csv" --out "$work/bench.png"
check "plot_bench: the PNG" python3 "$valid_png" "$work/bench.png"

# Bad input: one line, exit 2.
printf 'not a profile\n' > "$work/garbage.csv"
head -1 "$fixtures/expected_bench.csv" > "$work/header_only.csv"
expect_error 2 "missing.csv: No such file" python3 benchmarks/kernel_table.py "$work/missing.csv" \
  --ceilings "$fixtures/ceilings.txt"
expect_error 2 "no ncu raw CSV header" python3 benchmarks/kernel_table.py "$work/garbage.csv" \
  --ceilings "$fixtures/ceilings.txt"
expect_error 2 "no 'gemm_bf16" python3 benchmarks/kernel_table.py "$fixtures/ncu_two_steps.csv" \
  --ceilings "$work/garbage.csv"
expect_error 2 "go together" python3 benchmarks/kernel_table.py "$fixtures/ncu_two_steps.csv" \
  --ceilings "$fixtures/ceilings.txt" --calibration "$fixtures/ncu_gemm_once.csv"
expect_error 2 "garbage.csv:1: not a run record" python3 benchmarks/bench_results.py table \
  "$work/garbage.csv" --csv "$work/x.csv"
expect_error 2 "invalid choice: 'd13'" python3 benchmarks/bench_results.py record --system s \
  --model d13 --seq-len 1024 --status failed
expect_error 2 "no measured row" "$plot" "$work/header_only.csv" --out "$work/x.png"
expect_error 2 "not a benchmark table" "$plot" "$work/garbage.csv" --out "$work/x.png"

# ceilings and gpu_bench.sh without a GPU.
check "ceilings: SKIP and exit 0 without a GPU" bash -c "'$ceilings' | grep -qx 'SKIP ceilings: .*'"
expect_error 2 "--repeats needs an integer" "$ceilings" --repeats 0
mkdir -p "$work/bundle/bin"
cp "$ceilings" "$shardtrain" "$work/bundle/bin/"
expect_error 1 "^gpu_bench: no usable GPU: SKIP ceilings" bash benchmarks/gpu_bench.sh \
  --bundle "$work/bundle" --out "$work/out"
expect_error 2 "^gpu_bench: no bundle at" bash benchmarks/gpu_bench.sh --bundle "$work/none"
expect_error 2 "^gpu_bench: unknown argument '--fast'" bash benchmarks/gpu_bench.sh --fast
expect_error 2 "^gpu_bench: --sizes: 'd13' is not one of" bash benchmarks/gpu_bench.sh --sizes d13
expect_error 2 "^gpu_bench: '0' is not a positive integer" bash benchmarks/gpu_bench.sh --steps 0

# Stand-in ceilings: the runs themselves fail here, and each becomes a row.
printf '#!/bin/sh\ncat "%s"\n' "$PWD/$fixtures/ceilings.txt" > "$work/bundle/bin/ceilings"
session=$(mktemp -d /tmp/st-gb.XXXXXX) # Open MPI's session files, apart from other tests'
if TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session bash benchmarks/gpu_bench.sh \
  --bundle "$work/bundle" --out "$work/out" --sizes d12 --micro-batches 16 --no-kernels \
  --systems shardtrain-zero3,pytorch-compile > "$work/bench.log" 2>&1; then
  check "gpu_bench: every run a row" python3 - "$work/out/bench.csv" << 'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["system"], r["status"], r["micro_batch"]) for r in rows] == \
    [("shardtrain-zero3", "failed", "16"), ("pytorch-compile", "failed", "16")], rows
assert "no usable GPU" in rows[0]["note"], rows[0]
PY
  for f in ceilings.txt runs.jsonl bench.csv table.txt logs.tar.xz; do
    check "gpu_bench: wrote $f" test -s "$work/out/$f"
  done
else
  echo "FAIL: gpu_bench.sh with stand-in ceilings:"; cat "$work/bench.log"; fail=1
fi
# Another attention kernel names shardtrain's rows after it.
ST_CUDA_ATTENTION=flash TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session bash \
  benchmarks/gpu_bench.sh --bundle "$work/bundle" --out "$work/flash" --sizes d24 \
  --micro-batches 8 --no-kernels --systems shardtrain-zero0 > "$work/flash.log" 2>&1
check "gpu_bench: ST_CUDA_ATTENTION=flash rows" \
  grep -q '^d24,354.8,shardtrain-zero0-flash,failed,8,' "$work/flash/bench.csv"
# A run that warns that another kind ran is no row of the kind it is named after.
mkdir -p "$work/fallback/bin"
cp "$work/bundle/bin/ceilings" "$work/fallback/bin/"
printf '#!/bin/sh
echo "W ST_CUDA_ATTENTION=cudnn: cannot load cuDNN; the flash attention kernels run instead" >&2
' \
  > "$work/fallback/bin/shardtrain"
chmod +x "$work/fallback/bin/shardtrain"
ST_CUDA_ATTENTION=cudnn TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session bash \
  benchmarks/gpu_bench.sh --bundle "$work/fallback" --out "$work/cudnn" --sizes d24 \
  --micro-batches 8 --no-kernels --systems shardtrain-zero0 > "$work/cudnn.log" 2>&1
check "gpu_bench: a fallback from cuDNN is a failed row quoting the warning" \
  grep -q '^d24,354.8,shardtrain-zero0-cudnn,failed,8,.*the flash attention kernels run instead' \
  "$work/cudnn/bench.csv"
rm -rf "$session"
# The PyTorch peer runs with the library path from before the bundle's env.sh (gpu-bundle's:
# BUNDLE/lib, /usr/local/cuda/lib64 and /usr/lib/x86_64-linux-gnu first): a stand-in python3
# reports the path the peer got.
mkdir -p "$work/peer_path"
cat > "$work/peer_path/python3" << 'EOF'
#!/bin/sh
case "$1" in
  */gpt2_torch.py)
    printf 'result {"system": "pytorch-compile", "model": "d12", "seq_len": 1024, '
    printf '"status": "failed", "note": "path %s"}\n' "${LD_LIBRARY_PATH-unset}"
    exit 1 ;;
esac
exec "$REAL_PYTHON3" "$@"
EOF
chmod +x "$work/peer_path/python3"
env_sh="$(cd "$work/bundle" && pwd)/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
for before in "" /opt/mine; do
  REAL_PYTHON3=$(command -v python3) LD_LIBRARY_PATH=$env_sh${before:+:$before} \
    PATH=$work/peer_path:$PATH bash benchmarks/gpu_bench.sh --bundle "$work/bundle" \
    --out "$work/path$before" --sizes d12 --micro-batches 16 --no-kernels \
    --systems pytorch-compile > "$work/path.log" 2>&1
  check "gpu_bench: the peer's library path is '${before:-unset}'" grep -q \
    "^d12,124.4,pytorch-compile,failed,,,1024,,,,,path ${before:-unset}$" \
    "$work/path$before/bench.csv"
done

check "gpt2_torch.py compiles" python3 -c "import py_compile, sys
py_compile.compile('benchmarks/peers/gpt2_torch.py', cfile=sys.argv[1], doraise=True)" \
  "$work/gpt2_torch.pyc"

[ $fail -eq 0 ] && echo "gpu_bench_test: passed" || echo "gpu_bench_test: FAILED"
exit $fail
