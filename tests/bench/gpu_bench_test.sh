#!/usr/bin/env bash
# The GPU benchmark's parts that run without a GPU (benchmarks/gpu_bench.sh, docs/PERFORMANCE.md):
#  - bench_common.py: GPT-2's published parameter counts, 6N + 6LCT worked out by hand for d12
#    and d48; the trainer's own MFU (--peak-tflops, C code) of a real run equals the one its
#    benchmark record gives (below);
#  - bench_results.py: hand-made run records (two partial runs, a failed try replaced by a later
#    one) give the hand-checked table (expected_bench.csv: MFU, GiB, order), and a "skipped"
#    record replaces no earlier one; a hand-made metrics file gives the tokens over the summed
#    step times of the steps after the warm-up (4000, not the mean of the rates) and the largest
#    sum of category peaks, the tokens exactly from the running count `tokens` (rates that
#    disagree are not used), and no measurement where the count before the first timed step is
#    unknown; a real CPU run of shardtrain on random_tokens.py's shard gives an ok record;
#  - kernel_table.py: a hand-made ncu profile of two steps gives the last step's rows as worked out
#    by hand (shares, TFLOP/s with the calibration GEMM's 2 FLOPs per counted op, GB/s, limits),
#    and the whole profile when no step boundary is found;
#  - plot_bench.py draws a valid PNG of the table;
#  - gpu_bench.sh without a GPU (the real `ceilings` prints SKIP): one line, exit 1; without a
#    bundle or with a bad flag: one line, exit 2; with stand-in ceilings, every run fails (no GPU,
#    no PyTorch here) and becomes a row of the table, exit 0, and with ST_CUDA_ATTENTION=flash
#    shardtrain's rows are named after it; a stand-in shardtrain that succeeds but says that
#    the flash kernels ran instead of cuDNN's (the default) gives a failed row quoting the line;
#    a stand-in PyTorch peer gets the library path from before the bundle's env.sh (none, one
#    directory, two); with stand-in binaries that hang, fail or write bad metrics: a cut run is
#    a timeout row and leaves no process behind (a TERM-deaf one is KILLed 10 s after its TERM,
#    one in a process group of its own is killed with the run's session), --budget cuts a run
#    and makes the next a "skipped" row and the call ends within it, hanging ceilings and ncu
#    are cut within the budget, no ncu runs after a failed d12 shardtrain-zero0 row, a table
#    that cannot be made is exit 3, rejected metrics are a failed row and each run prints its
#    own record, and a call killed mid-run keeps the finished run's record and logs in --out,
#    and one sent a TERM ends the run in flight (nothing left of it), records it and exits 143;
#  - plan_d12.sh and scaling_sweep.sh show a failed build's error (a stand-in bazel);
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
echo "I ST_CUDA_ATTENTION=cudnn: cannot load cuDNN; the flash attention kernels run instead" >&2
' \
  > "$work/fallback/bin/shardtrain"
chmod +x "$work/fallback/bin/shardtrain"
TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session bash \
  benchmarks/gpu_bench.sh --bundle "$work/fallback" --out "$work/cudnn" --sizes d24 \
  --micro-batches 8 --no-kernels --systems shardtrain-zero0 > "$work/cudnn.log" 2>&1
check "gpu_bench: a fallback from cuDNN is a failed row quoting the line" \
  grep -q '^d24,354.8,shardtrain-zero0,failed,8,.*the flash attention kernels run instead' \
  "$work/cudnn/bench.csv"
# bench OUT ARGS...: gpu_bench.sh --out OUT ARGS..., Open MPI's session files apart from other
# tests', bounded (a script that hangs fails the test rather than hanging it); its output in
# OUT.log, its status returned.
bench() {
  local out=$1
  shift
  TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session timeout -k 5 150 \
    bash benchmarks/gpu_bench.sh --out "$out" "$@" > "$out.log" 2>&1
}
# alive PID: PID runs (it exists and is no zombie).
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>&1) || return 1
  [ "${state:0:1}" != Z ]
}
# ended PID: PID (a pid, not some other text) has ended.
ended() { [[ $1 =~ ^[0-9]+$ ]] && ! alive "$1"; }
# none_left WHAT: a check that every process a hanging stand-in wrote down has ended.
none_left() {
  local f pid
  for f in hang sleep orphan; do
    pid=$(cat "$STANDIN_DIR/$f.pid" 2>&1)
    check "gpu_bench: nothing of $1 outlives it ($f: $pid)" ended "$pid"
  done
}
# reap_standin: KILL to what a hanging stand-in started that still runs (by the pids it wrote,
# each checked to be one of its sleepers), whatever the script under test left.
reap_standin() {
  local f pid
  for f in hang sleep orphan; do
    pid=$(cat "$STANDIN_DIR/$f.pid" 2>&1)
    if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" &&
      grep -qaE 'sleep|bin/shardtrain' "/proc/$pid/cmdline"; then
      kill -s KILL "$pid"
    fi
  done
  rm -f "$STANDIN_DIR/"*.pid
}
# A stand-in shardtrain: at --zero Z it does what STANDIN_Z says (STANDIN_0, STANDIN_3): ok
# (writes the three-step metrics fixture, exit 0), garbage (a metrics file that is none, exit 0),
# hang (starts a process that puts itself in a process group of its own, as Open MPI puts each
# rank, and a sleep, both deaf to TERM; their pids go to $STANDIN_DIR/orphan.pid, once the group
# is made, and sleep.pid, and last its own to hang.pid; then it waits); else it fails (so does
# the kernel table's run, which has no --zero).
mkdir -p "$work/standin/bin"
cp "$work/bundle/bin/ceilings" "$work/standin/bin/"
cat > "$work/standin/bin/shardtrain" << 'EOF'
#!/usr/bin/env bash
zero=none metrics=
while [ $# -gt 0 ]; do
  case $1 in
    --zero) zero=$2 ;;
    --metrics) metrics=$2 ;;
  esac
  shift
done
what=STANDIN_$zero
case ${!what:-fail} in
  ok) cp "$STANDIN_METRICS" "$metrics" ;;
  garbage) echo 'not a metrics line' > "$metrics" ;;
  hang)
    trap '' TERM
    python3 -c 'import os, sys, time
os.setpgid(0, 0)
with open(sys.argv[1] + ".part", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".part", sys.argv[1])
time.sleep(300)' "$STANDIN_DIR/orphan.pid" &
    for ((i = 0; i < 200; i++)); do # until it is in a group of its own
      [ -s "$STANDIN_DIR/orphan.pid" ] && break
      sleep 0.05
    done
    sleep 300 &
    echo $! > "$STANDIN_DIR/sleep.pid"
    echo $$ > "$STANDIN_DIR/hang.pid"
    wait ;;
  *) echo "error: the stand-in fails here" >&2; exit 1 ;;
esac
EOF
chmod +x "$work/standin/bin/shardtrain"
export STANDIN_METRICS=$PWD/$fixtures/metrics_three_steps.jsonl STANDIN_DIR=$work/standin
# A stand-in python3 for the PyTorch peer (every other script runs in the real one): with
# PEER=deaf it sleeps 40 s deaf to TERM; else it reports the library path it got, as a failed row.
mkdir -p "$work/peer"
cat > "$work/peer/python3" << 'EOF'
#!/bin/sh
case "$1" in
  */gpt2_torch.py)
    if [ "${PEER:-}" = deaf ]; then
      trap '' TERM
      sleep 40
      exit 1
    fi
    printf 'result {"system": "pytorch-compile", "model": "d12", "seq_len": 1024, '
    printf '"status": "failed", "note": "path %s"}\n' "${LD_LIBRARY_PATH-unset}"
    exit 1 ;;
esac
exec "$REAL_PYTHON3" "$@"
EOF
chmod +x "$work/peer/python3"
REAL_PYTHON3=$(command -v python3)
export REAL_PYTHON3

# The PyTorch peer runs with the library path from before the bundle's env.sh, whose line (as
# tools/gpu_bundle.sh rewrites ../shared/tools/gpu-bundle's) is copied here: BUNDLE/lib and
# /usr/local/cuda/lib64, the path from before (here none, one directory, two), then Debian's.
# shellcheck disable=SC2016 # env.sh's text, expanded where it is sourced
printf '%s\n' 'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)' \
  'export LD_LIBRARY_PATH=$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/lib/x86_64-linux-gnu' \
  > "$work/bundle/env.sh"
n=0
for before in "" /opt/mine /opt/a:/opt/b; do
  n=$((n + 1))
  (
    if [ -n "$before" ]; then export LD_LIBRARY_PATH=$before; else unset LD_LIBRARY_PATH; fi
    # shellcheck source=/dev/null # written above
    . "$work/bundle/env.sh"
    PATH=$work/peer:$PATH bench "$work/path$n" --bundle "$work/bundle" --sizes d12 \
      --micro-batches 16 --no-kernels --systems pytorch-compile
  )
  check "gpu_bench: the peer's library path is '${before:-unset}'" grep -q \
    "^d12,124.4,pytorch-compile,failed,,,1024,,,,,path ${before:-unset}$" "$work/path$n/bench.csv"
done

# A cut run ends with everything it started: the TERM-deaf stand-in rank and the process it put
# in a process group of its own, out of reach of timeout's signals (killed with the run's
# session), and the TERM-deaf peer (KILLed 10 s after its TERM: timeout -k). With --run-timeout 3
# that is about 3 s and 13 s, not the peer's 40.
SECONDS=0
STANDIN_0=hang PEER=deaf PATH=$work/peer:$PATH bench "$work/cut" --bundle "$work/standin" \
  --sizes d12 --micro-batches 16 --no-kernels --run-timeout 3 \
  --systems shardtrain-zero0,pytorch-compile
took=$SECONDS
check "gpu_bench: cut runs are timeout rows" python3 - "$work/cut/bench.csv" << 'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["system"], r["status"]) for r in rows] == \
    [("shardtrain-zero0", "timeout"), ("pytorch-compile", "timeout")], rows
PY
none_left "a cut run"
check "gpu_bench: a TERM-deaf run is KILLed (took $took s; the peer sleeps 40)" test "$took" -lt 38
reap_standin

# The budget: the first run is cut where the budget ends (its --run-timeout is 480), the next is
# not started but is a "skipped" row, and the whole call ends within the budget.
SECONDS=0
STANDIN_0=hang STANDIN_3=hang bench "$work/budget" --bundle "$work/standin" --sizes d12 \
  --micro-batches 16 --no-kernels --budget 45 --min-run 2 \
  --systems shardtrain-zero0,shardtrain-zero3
took=$SECONDS
check "gpu_bench: --budget cuts a run and skips the next" python3 - "$work/budget/bench.csv" << 'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["system"], r["status"]) for r in rows] == \
    [("shardtrain-zero0", "timeout"), ("shardtrain-zero3", "skipped")], rows
assert "by --budget 45 (--run-timeout 480)" in rows[0]["note"], rows[0]
assert rows[1]["note"].startswith("budget: ") and rows[1]["micro_batch"] == "16", rows[1]
PY
check "gpu_bench: --budget 45 ends within it (took $took s)" test "$took" -le 46
none_left "a run cut by the budget"
reap_standin
# The ceilings and ncu are bounded too: ceilings that hang are cut within the budget (exit 1),
# and so is an ncu that hangs on the calibration GEMM, after which the profile is skipped.
mkdir -p "$work/slow/bin"
cp "$work/standin/bin/shardtrain" "$work/slow/bin/"
printf '#!/bin/sh\nexec sleep 300\n' > "$work/slow/bin/ceilings"
chmod +x "$work/slow/bin/ceilings"
SECONDS=0
expect_error 1 "^gpu_bench: ceilings timed out after [0-9]+ s" timeout -k 5 60 \
  bash benchmarks/gpu_bench.sh --bundle "$work/slow" --out "$work/slow_out" --budget 32
took=$SECONDS
check "gpu_bench: hanging ceilings end within --budget 32 (took $took s)" test "$took" -le 33
mkdir -p "$work/ncu"
printf '#!/bin/sh\nexec sleep 300\n' > "$work/ncu/ncu"
chmod +x "$work/ncu/ncu"
SECONDS=0
PATH=$work/ncu:$PATH bench "$work/ncu_hang" --bundle "$work/standin" --kernels-only \
  --budget 40 --min-run 2
took=$SECONDS
check "gpu_bench: a hanging ncu is cut, the profile skipped" grep -qz \
  'ncu on the calibration GEMM: exit 124, cut after.*kernel table: skipped: budget' \
  "$work/ncu_hang/kernels.txt"
check "gpu_bench: --budget 40 with a hanging ncu (took $took s)" test "$took" -le 41

# No kernel profile after a d12 shardtrain-zero0 row that failed (an ncu that runs leaves a
# mark); and a table that cannot be made (bench.csv a directory) is exit 3.
printf '#!/bin/sh\ntouch "%s"\nexit 1\n' "$work/ncu_ran" > "$work/ncu/ncu"
mkdir -p "$work/failed_row/bench.csv"
PATH=$work/ncu:$PATH bench "$work/failed_row" --bundle "$work/standin" --sizes d12 \
  --micro-batches 16 --systems shardtrain-zero0
rc=$?
check "gpu_bench: no profile after a failed d12 row" grep -q \
  "^kernel table: skipped: the d12 shardtrain-zero0 row is 'failed'" "$work/failed_row/kernels.txt"
check "gpu_bench: no ncu after a failed d12 row" test ! -e "$work/ncu_ran"
check "gpu_bench: a failed table is exit 3 (got $rc)" test "$rc" -eq 3
check "gpu_bench: a failed table says so" grep -q '^gpu_bench: bench_results.py table failed' \
  "$work/failed_row.log"

# Metrics that bench_results.py rejects make a failed row saying so, and the line after each
# run's heading is its own record (not the run's before it).
STANDIN_3=ok STANDIN_0=garbage bench "$work/garbage" --bundle "$work/standin" --sizes d12 \
  --micro-batches 16 --no-kernels --systems shardtrain-zero3,shardtrain-zero0
check "gpu_bench: rejected metrics are a failed row" grep -q \
  '^d12,124.4,shardtrain-zero0,failed,16,32,.*not a shardtrain metrics file' \
  "$work/garbage/bench.csv"
check "gpu_bench: each run's line is its record" grep -A1 '^== d12 shardtrain-zero0' \
  "$work/garbage.log"
grep -A1 '^== d12 shardtrain-zero0' "$work/garbage.log" | tail -1 > "$work/garbage.line"
check "gpu_bench: ... of shardtrain-zero0, failed" grep -q \
  '"system": "shardtrain-zero0", .*"status": "failed"' "$work/garbage.line"

# A call killed while a run is in flight (as the device tool kills one at its limit) keeps what
# finished: the record of the run before it in runs.jsonl, its log and metrics in logs.tar.xz.
# (Its work folder, left behind, is in $session, with TMPDIR.)
STANDIN_0=ok STANDIN_3=hang TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session \
  bash benchmarks/gpu_bench.sh --bundle "$work/standin" --out "$work/killed" --sizes d12 \
  --micro-batches 16 --no-kernels --run-timeout 60 --systems shardtrain-zero0,shardtrain-zero3 \
  > "$work/killed.log" 2>&1 &
bench_pid=$!
for ((i = 0; i < 600; i++)); do
  [ -s "$work/standin/hang.pid" ] && break
  sleep 0.1
done
kill -s KILL "$bench_pid"
{ wait "$bench_pid"; } 2> "$work/killed.wait" # bash's "Killed" line
check "gpu_bench: killed, runs.jsonl has the finished run" python3 - "$work/killed/runs.jsonl" \
  << 'PY'
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
assert [(r["system"], r["status"]) for r in recs] == [("shardtrain-zero0", "ok")], recs
PY
tar -tJf "$work/killed/logs.tar.xz" > "$work/killed.tar.txt" 2>&1
for f in d12_shardtrain-zero0_mb16.log d12_shardtrain-zero0_mb16.jsonl; do
  check "gpu_bench: killed, logs.tar.xz has $f" grep -qx "./$f" "$work/killed.tar.txt"
done
reap_standin
# A TERM instead (a person, or a tool that asks first) ends the run in flight with all it
# started, makes it a failed row, and exits 143.
STANDIN_0=hang TMPDIR=$session OMPI_MCA_btl_vader_backing_directory=$session \
  bash benchmarks/gpu_bench.sh --bundle "$work/standin" --out "$work/termed" --sizes d12 \
  --micro-batches 16 --no-kernels --run-timeout 60 --systems shardtrain-zero0 \
  > "$work/termed.log" 2>&1 &
bench_pid=$!
for ((i = 0; i < 600; i++)); do
  [ -s "$work/standin/hang.pid" ] && break
  sleep 0.1
done
SECONDS=0
kill -s TERM "$bench_pid"
wait "$bench_pid"
rc=$?
took=$SECONDS
check "gpu_bench: a TERM is exit 143 within 10 s (exit $rc, $took s)" test "$rc" -eq 143 -a \
  "$took" -le 10
check "gpu_bench: a TERM makes the run in flight a failed row" grep -q \
  '"system": "shardtrain-zero0", .*"status": "failed", .*"note": "stopped by SIGTERM' \
  "$work/termed/runs.jsonl"
check "gpu_bench: a TERM says so" grep -q \
  '^gpu_bench: stopped by SIGTERM after [0-9]* s, during d12_shardtrain-zero0_mb16' \
  "$work/termed.log"
none_left "a run stopped by a TERM"
reap_standin

# bench_results.py counts the timed steps' tokens from the metrics' running count `tokens`
# (engine/train/metrics.h), not from the rates (here deliberately wrong): steps 1 and 2, 3000 -
# 1000 tokens over 0.5 s, exactly; with no step before the first timed one, from 0 at step 0,
# and unknown where the records start later (a resumed run).
cat > "$work/rates_off.jsonl" << 'EOF'
{"step": 0, "tokens": 1000, "tokens_per_s": 1, "step_ms": 100, "mem": {"params": 4}}
{"step": 1, "tokens": 2000, "tokens_per_s": 2, "step_ms": 200, "mem": {"params": 4}}
{"step": 2, "tokens": 3000, "tokens_per_s": null, "step_ms": 300, "mem": {"params": 4}}
EOF
tail -2 "$work/rates_off.jsonl" > "$work/resumed.jsonl"
check "bench_results: tokens from the metrics' count" python3 - "$work" << 'PY'
import json, subprocess, sys
def rec(name, warmup):
    out = subprocess.run(["python3", "benchmarks/bench_results.py", "shardtrain",
                          f"{sys.argv[1]}/{name}.jsonl", "--warmup", str(warmup), "--system",
                          "shardtrain-zero0", "--model", "d12", "--seq-len", "1024"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out[len("result "):])
r = rec("rates_off", 1)
assert r["status"] == "ok" and r["tokens_per_s"] == 4000, r
r = rec("rates_off", 0)
assert r["status"] == "ok" and r["tokens_per_s"] == 5000, r
r = rec("resumed", 0)
assert r["status"] == "failed" and "tokens before it are unknown" in r["note"], r
PY

# When calls merge, a "skipped" record (a later call out of time) replaces no earlier record.
cat > "$work/skipped_after.jsonl" << 'EOF'
{"system": "shardtrain-zero0", "model": "d12", "seq_len": 1024, "status": "ok", "tokens_per_s": 9}
{"system": "shardtrain-zero0", "model": "d12", "seq_len": 1024, "status": "skipped"}
EOF
python3 benchmarks/bench_results.py table "$work/skipped_after.jsonl" \
  --csv "$work/skipped_after.csv" > "$work/skipped_after.txt" 2>&1
check "bench_results: a skipped record replaces no earlier one" grep -q \
  '^d12,124.4,shardtrain-zero0,ok,' "$work/skipped_after.csv"

# The scripts that build shardtrain first show a failed build's error (a stand-in bazel).
mkdir -p "$work/bazel"
printf '#!/bin/sh\necho "ERROR: stand-in build failure in engine/cli" >&2\nexit 1\n' \
  > "$work/bazel/bazel"
chmod +x "$work/bazel/bazel"
for script in plan_d12.sh scaling_sweep.sh; do
  PATH=$work/bazel:$PATH bash "benchmarks/$script" "$work/sweep.png" > "$work/$script.out" 2>&1
  rc=$?
  check "$script: a failed build fails (exit $rc)" test "$rc" -ne 0
  check "$script: a failed build says why" grep -q 'stand-in build failure' "$work/$script.out"
done

check "gpt2_torch.py compiles" python3 -c "import py_compile, sys
py_compile.compile('benchmarks/peers/gpt2_torch.py', cfile=sys.argv[1], doraise=True)" \
  "$work/gpt2_torch.pyc"

rm -rf "$session"
[ $fail -eq 0 ] && echo "gpu_bench_test: passed" || echo "gpu_bench_test: FAILED"
exit $fail
