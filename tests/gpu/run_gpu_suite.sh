#!/usr/bin/env bash
# run_gpu_suite.sh - the GPU checks of the GPU core (issue 8), run on the GPU machine from a
# bundle made by tools/gpu_bundle.sh:
#   source gpu/env.sh && bash tests/gpu/run_gpu_suite.sh gpu SECTION...
# A session has 15 minutes of device time, so two commands (docs/BUILD.md, "The GPU suite"):
#   1. ops train streams d12     (timeout_s 540; the suite stops itself within SUITE_BUDGET)
#   2. equivalence d12x4         (after the first is read; sanitizer and calibrate: later)
# Every command starts with `preflight`, which stops the command at once (with a line saying
# why) where nothing else could pass. Then each section prints one line a run or binary,
# "[  T s] ok   NAME (N s)" or "[  T s] FAIL NAME (N s, exit X)" followed by at most the last
# 1,500 bytes of its log (T: seconds since the start), ends with "SECTION: passed (N s)" or
# "SECTION: FAILED (N s)", and the command ends with a summary: one line a section, one a
# failure, and the verdict, always inside the last 12,000 characters that come back.
# Sections:
#   preflight    (always first, about 10 s) the bundle unpacks (python3's tarfile where xz is
#                missing); nvidia-smi -L lists a GPU (its persistence mode and used memory are
#                printed); no bundled binary lacks a library (ldd); libcublasLt.so.13 is found;
#                mpirun, python3 and timeout exist (libnccl, libcudnn, libnvrtc and
#                compute-sanitizer are reported); mpirun starts a rank; device_cuda_test and
#                cast_test run on the GPU
#   ops          every kernel test binary (each op on the CUDA backend against float64 loops and
#                the CPU backend), the cast, the offloaded optimizer and the device's streams,
#                events and memory query, then ops_vocab_test, which walks the whole vocabulary
#                (its cuDNN graphs are built at run time: it may take OPS_VOCAB_LIMIT, 300 s)
#   train        tests/gpu/train_gpu_test.sh: tiny fp32 GPU vs CPU per step, bf16/fp16 and bf16
#                params with fp32 gradients vs fp32; then tests/train/checkpoint_async_test.sh
#                with its training runs on the GPU (4 ranks share it through nccl-hostid):
#                background saves, from a pinned snapshot, equal to blocking ones byte for byte
#   streams      the collectives on device buffers and a unit's stream-ordered gather, publish
#                and reduction (duplicate NCCL communicators, events between streams) on 1 and 2
#                ranks sharing the GPU through nccl-hostid; the public unit calls (state written,
#                published, read back; a publish refused on every rank) on 4; then an NCCL
#                set-up that one rank cannot join (NCCL_SOCKET_IFNAME names no interface on
#                rank 1): the job must end, non-zero, with an error line, within 120 s at
#                ST_COMM_TIMEOUT=10 (the deadline of core/deadline.h, or NCCL's own error on
#                every rank), not hang
#   d12          d12 in bf16, micro-batch 16 x 1024, 20 steps on one GPU: simple attention, then
#                ST_CUDA_ATTENTION=flash and =cudnn, each within 1% of simple's losses and no
#                fallback warned about; the loss falls; prints step time and tokens/s (median of
#                steps 6-20)
#   d12x4        the same d12 run on 4 ranks sharing the GPU at ZeRO-3 (--dp-shard 4)
#   equivalence  tests/train/equivalence_test.sh on the GPU with NCCL (2-8 ranks share the one
#                GPU through nccl-hostid): every mesh and stage against one rank, bitwise
#                across stages at equal mesh
#   calibrate    the simulator's GPU calibration and validation (docs/SIMULATOR.md) in one
#                command: benchmarks/hardware/measure_gpu.sh writes gpu_shared.hw (the hardware
#                file of ranks sharing this GPU) and gpu_shared.txt (its tables), then
#                benchmarks/validate_simulator.sh --only gpu-measured trains d12, d24 and d48 at
#                world 1 and d12 on 2, 4 and 8 ranks at ZeRO-1 and ZeRO-3 (4 steps, one round)
#                and writes validation.md, measured against predicted; passes when both finish
#                and the table has its 9 rows. Expected on an H100 (estimates: written without
#                a GPU), about 5 minutes of the 6 it must stay under:
#                  ceilings 10 s, mpi_p2p 3 s, op_timings (d12 and d48 micro-batches, two
#                  optimizer passes) 20 s, NCCL's curves (3 rank counts x 3 sizes x 2 launches
#                  of 5 ops, each launch setting NCCL up) 90 s;
#                  world 1: d12 10 s, d24 15 s, d48 45 s (mostly the host initialising 1.5B
#                  parameters); d12 on 2-8 ranks: 6 runs of about 15 s (NCCL's socket
#                  transport moves 250 MB a step at ZeRO-1, 375 MB at ZeRO-3)
#   sanitizer    compute-sanitizer memcheck, racecheck and synccheck on ops_vocab_test and on a
#                2-rank, 3-step d6 run (each run cut at SANITIZER_RUN_LIMIT, 150 s)
# Time: each section has a hard bound (below, seconds) and so has each run in it; nothing
# starts past the command's budget, SUITE_BUDGET seconds from the start (default 510, for a
# device command of timeout_s 540), less 15 s kept for the summary; a section left with under
# 20 s is reported "not run" (a failure). A hang costs its run's bound, not the command.
#   section bounds: preflight 30, ops 330 (a binary 90, ops_vocab_test 300), train 240 (a run
#   60), streams 150 (a job 60), d12 210 (a run 90), d12x4 150, equivalence 540 (a run 60),
#   calibrate 360, sanitizer 540; all multiplied by SUITE_TIME_SCALE (default 1; the CUDA
#   emulation's rehearsal, tools/cuda_emu/rehearse_suite.sh, sets more)
# Every mpirun runs under `timeout` (the suite's own and train_runs.sh's, through a wrapper given
# to the scripts as their mpirun.sh). Exported for every run: ST_TEST_REQUIRE_GPU=1 (a test that
# would SKIP fails instead: tests/testing.h), ST_COMM_TIMEOUT=60, NCCL_DEBUG=WARN, and for the
# scripts TRAIN_RUN_KEEP_GOING=1 (tests/train/train_runs.sh: a failed run is recorded and the
# next one runs).
# Logs: under BUNDLE/logs/<time>-<sections>/ (the scripts' runs in subfolders there); where the
# device tool sets OUT, which brings back at most 8 files, they are packed into
# $OUT/logs.tar.xz (logs.tar.gz without xz) with $OUT/summary.txt beside, and calibrate's
# gpu_shared.hw, gpu_shared.txt and validation.md.
# Exit status: 0 when every section asked for passed; 1 otherwise; 2 for a usage error.
set -uo pipefail
bundle=$(cd "${1:?usage: run_gpu_suite.sh BUNDLE_DIR SECTION...}" && pwd) || exit 2
shift
here=$(cd "$(dirname "$0")/../.." && pwd)
sections=(preflight)
for section in "$@"; do
  case $section in
    preflight) ;;
    ops | train | streams | d12 | d12x4 | equivalence | calibrate | sanitizer)
      sections+=("$section") ;;
    *) echo "run_gpu_suite: unknown section '$section' (preflight ops train streams d12 d12x4" \
      "equivalence calibrate sanitizer)"; exit 2 ;;
  esac
done

scale=${SUITE_TIME_SCALE:-1}
budget=${SUITE_BUDGET:-$((510 * scale))}
suite_start=$(date +%s)
suite_end=$((suite_start + budget - 15))
declare -A bound=([preflight]=30 [ops]=330 [train]=240 [streams]=150 [d12]=210 [d12x4]=150
  [equivalence]=540 [calibrate]=360 [sanitizer]=540)
logs=$bundle/logs/$(date +%Y%m%d-%H%M%S)-$(IFS=-; echo "${sections[*]}")
mkdir -p "$logs" || exit 2
summary=()  # one line a section
failures=() # one line a failure
bin=$bundle/bin
st=$bin/shardtrain
data=$bundle/data
mpirun_sh=$here/tests/mpirun.sh

# ---- output ---------------------------------------------------------------------------------

now() { date +%s; }
# say TEXT...: a progress line, stamped with the seconds since the start.
say() { printf '[%4d s] %s\n' "$(($(now) - suite_start))" "$*"; }
# excerpt LOG: the last 1,500 bytes of LOG, indented, so a failure prints a bounded amount.
excerpt() {
  echo "    --- last 1500 bytes of ${1#"$logs"/}:"
  tail -c 1500 "$1" | sed 's/^/    /'
  echo
}
# failed WHAT: a failure for the summary (200 characters at most).
failed() { failures+=("${section:-suite}: ${1:0:200}"); }
# why RC: the words after an exit status: timeout's 124 (137 after its KILL) is a hang.
why() {
  case $1 in
    124 | 137) echo "exit $1: timed out" ;;
    *) echo "exit $1" ;;
  esac
}

# ---- time bounds ----------------------------------------------------------------------------

section_end=$suite_end
# limit SECONDS: SECONDS (times SUITE_TIME_SCALE), but not past the section's end.
limit() {
  local want=$(($1 * scale)) left=$((section_end - $(now)))
  [ "$left" -lt "$want" ] && want=$left
  echo "$want"
}
# bounded NAME SECONDS LOG CMD...: CMD under `timeout` (limit SECONDS), output to LOG, then one
# line: ok, or FAIL with the log's end; the status is CMD's.
bounded() {
  local name=$1 secs rc start
  secs=$(limit "$2")
  local log=$3
  shift 3
  start=$(now)
  if [ "$secs" -le 0 ]; then
    say "FAIL $name: not started, the section's time is spent"
    failed "$name: not started, the section's time is spent"
    return 124
  fi
  timeout -k 10 "$secs" "$@" > "$log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    local last
    last=$(tail -n 1 "$log" | cut -c 1-160)
    say "ok   $name ($(($(now) - start)) s)${last:+: $last}"
  else
    say "FAIL $name ($(($(now) - start)) s, $(why "$rc"))"
    excerpt "$log"
    failed "$name ($(($(now) - start)) s, $(why "$rc"))"
  fi
  return "$rc"
}
# run_script NAME SECONDS CMD...: a test script under `timeout`, its lines passed on stamped (80 at
# most, 300 characters each; all of it in NAME.log) and its FAIL lines kept for the summary. Not
# started with under 30 s left: its runs stop 15 s before the section's end.
run_script() {
  local name=$1 secs rc start log=$logs/$1.log
  secs=$(limit "$2")
  shift 2
  start=$(now)
  if [ "$secs" -lt 30 ]; then
    say "FAIL $name: not started, the section's time is spent"
    failed "$name: not started, the section's time is spent"
    return 124
  fi
  say "$name: up to $secs s"
  # The runs inside stop by the section's end too (train_runs.sh, the timed mpirun.sh), 15 s
  # before it, which leaves the script the time to check what ran and say so.
  TRAIN_RUN_DEADLINE=$((section_end - 15)) ST_SUITE_DEADLINE=$((section_end - 15)) \
    timeout -k 10 "$secs" "$@" 2>&1 | tee "$log" | stamp 80
  rc=$?
  if [ "$rc" -eq 0 ]; then
    say "ok   $name ($(($(now) - start)) s)"
  else
    say "FAIL $name ($(($(now) - start)) s, $(why "$rc"))"
    local lines
    mapfile -t lines < <(grep -E '^FAIL' "$log" | sed 's/; the end of .*//' | head -n 8)
    local line
    for line in "${lines[@]}"; do failed "$name: $line"; done
    [ "${#lines[@]}" -gt 0 ] || failed "$name ($(why "$rc"))"
  fi
  return "$rc"
}
# stamp MAX: passes stdin on, each line stamped and cut to 300 characters, MAX lines at most.
stamp() {
  local line n=0
  while IFS= read -r line; do
    n=$((n + 1))
    [ "$n" -le "$1" ] && say "  ${line:0:300}"
    [ "$n" -eq $(($1 + 1)) ] && say "  ... (more in the log)"
  done
  return 0
}

# ---- set-up ---------------------------------------------------------------------------------

# tools/gpu_bundle.sh ships bin/, lib/ and fortunes/ in bundle.tar.xz. Unpacked into a folder of
# its own first, so a command killed halfway leaves no half bundle behind.
unpack() {
  [ -d "$bundle/bin" ] && return 0
  local tmp=$bundle/.unpack
  rm -rf "$tmp" && mkdir -p "$tmp" || return 1
  if [ -n "$(command -v xz)" ]; then
    tar -xJf "$bundle/bundle.tar.xz" -C "$tmp" || return 1
  else
    say "note: no xz here: unpacking with python3's tarfile"
    python3 - "$bundle/bundle.tar.xz" "$tmp" <<'PY' || return 1
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    try:
        t.extractall(sys.argv[2], filter="fully_trusted")
    except TypeError:  # a Python without extraction filters
        t.extractall(sys.argv[2])
PY
  fi
  local part
  for part in lib fortunes bin; do
    [ ! -e "$tmp/$part" ] || mv "$tmp/$part" "$bundle/$part" || return 1
  done
  rm -rf "$tmp"
}

# Called on the way out, whatever happened: the summary, then the logs packed for $OUT.
finish() {
  trap - EXIT TERM INT
  {
    echo "== summary: bundle $(version), $(($(now) - suite_start)) s"
    printf '%s\n' "${summary[@]}"
    local n=${#failures[@]} shown=0 f
    for f in "${failures[@]}"; do
      shown=$((shown + 1))
      [ "$shown" -le 30 ] && echo "  FAIL $f"
    done
    [ "$n" -le 30 ] || echo "  ... and $((n - 30)) more failures (logs)"
    if [ "$status" -eq 0 ]; then
      echo "verdict: passed"
    else
      echo "verdict: FAILED ($n failures)"
    fi
  } > "$logs/summary.txt"
  cat "$logs/summary.txt"
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT"; then
    cp "$logs/summary.txt" "$OUT/summary.txt"
    local f
    for f in gpu_shared.hw gpu_shared.txt validation.md; do
      [ ! -f "$logs/$f" ] || cp "$logs/$f" "$OUT/$f"
    done
    # The text of the logs (no data, checkpoints or exports), under 4 MiB a file.
    (cd "$logs" && find . -type f -size -4096k \( -name '*.log' -o -name '*.jsonl' \
      -o -name '*.txt' -o -name '*.md' -o -name '*.hw' -o -name '*.json' \) |
      sort > "$logs/.packed")
    if [ -n "$(command -v xz)" ]; then
      tar -cJf "$OUT/logs.tar.xz" -C "$logs" -T "$logs/.packed" && echo "logs: \$OUT/logs.tar.xz"
    else
      tar -czf "$OUT/logs.tar.gz" -C "$logs" -T "$logs/.packed" && echo "logs: \$OUT/logs.tar.gz"
    fi
  else
    echo "logs: $logs"
  fi
  exit "$status"
}
status=0
section=
trap finish EXIT
stopped() {
  say "stopped by a signal"
  status=1
  summary+=("${section:-suite}: stopped by a signal")
  exit 1
}
trap stopped TERM INT

unpack || { say "FAIL preflight: cannot unpack $bundle/bundle.tar.xz"; status=1; exit 1; }
# cuDNN's frontend loads a libcudart of its own (a workaround it applies on cuDNN <= 9.15) and
# takes libcudart.so.12 first where both majors are installed: this build is CUDA 13's.
export CUDNN_FRONTEND_CUDART_LIB_NAME=${CUDNN_FRONTEND_CUDART_LIB_NAME:-libcudart.so.13}
# compute-sanitizer lives beside nvcc, which the image may leave off PATH.
[ -n "$(command -v compute-sanitizer)" ] || [ ! -d /usr/local/cuda/bin ] ||
  export PATH=$PATH:/usr/local/cuda/bin
export ST_TEST_REQUIRE_GPU=1 TRAIN_RUN_KEEP_GOING=1 TRAIN_RUN_LOG_DIR=$logs
export ST_COMM_TIMEOUT=${ST_COMM_TIMEOUT:-$((60 * scale))} NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TRAIN_RUN_TIMEOUT=$((60 * scale))
# Every mpirun the scripts start goes through this, under `timeout`: its own limit
# (ST_SUITE_MPIRUN_LIMIT) and no later than the section's end (ST_SUITE_DEADLINE).
timed_mpirun=$logs/.mpirun_timed.sh
cat > "$timed_mpirun" <<EOF
#!/usr/bin/env bash
left=\$((\${ST_SUITE_DEADLINE:-\$((\$(date +%s) + 86400))} - \$(date +%s)))
secs=\${ST_SUITE_MPIRUN_LIMIT:-$((300 * scale))}
[ "\$left" -lt "\$secs" ] && secs=\$left
if [ "\$secs" -le 0 ]; then
  echo "mpirun (run_gpu_suite): not started, the section's time is spent"
  exit 124
fi
exec timeout -k 10 "\$secs" "$mpirun_sh" "\$@"
EOF
chmod +x "$timed_mpirun"

# ---- preflight ------------------------------------------------------------------------------

# Stops the command (status 1) where nothing else could pass: no GPU, a missing library, no
# mpirun, a device binary that cannot use the GPU. A device binary's failed check fails the
# preflight but lets the sections run (status 2). What is only reported: "note".
section_preflight() {
  local log=$logs/preflight.log fatal=() t lib checks=0
  say "bundle $(version); host ${HOSTNAME:-unknown}"
  if [ "${SUITE_EMULATED:-0}" = 1 ]; then
    say "note: the CUDA emulation (SUITE_EMULATED=1): nvidia-smi and the libraries not checked"
  elif [ -z "$(command -v nvidia-smi)" ]; then
    fatal+=("no nvidia-smi on PATH")
  elif ! timeout 20 nvidia-smi -L > "$log" 2>&1 || ! grep -q '^GPU ' "$log"; then
    fatal+=("nvidia-smi -L lists no GPU: $(head -c 300 "$log")")
  else
    say "$(head -n 2 "$log" | tr '\n' ' ')"
    say "name, driver, persistence mode, memory used, total: $(timeout 20 nvidia-smi \
      --query-gpu=name,driver_version,persistence_mode,memory.used,memory.total \
      --format=csv,noheader 2>&1 | head -n 2 | tr '\n' ' ')"
  fi
  for t in mpirun python3 timeout tar; do
    [ -n "$(command -v "$t")" ] || fatal+=("no $t on PATH")
  done
  say "note: compute-sanitizer: $(command -v compute-sanitizer ||
    echo 'not found (the sanitizer section needs it)')"
  [ -n "$(command -v xz)" ] ||
    say "note: no xz: the bundle was unpacked and the logs are packed without it"
  # Loader: every bundled ELF binary's libraries.
  local missing=()
  [ -n "$(command -v ldd)" ] || say "note: no ldd here: the binaries' libraries not checked"
  for t in "$bin"/*; do
    [ -n "$(command -v ldd)" ] || break
    [ "$(head -c 4 "$t" | tr -d '\177')" = ELF ] || continue
    while IFS= read -r lib; do missing+=("$(basename "$t"): $lib"); done \
      < <(ldd "$t" 2>&1 | grep 'not found' | sed 's/^[[:space:]]*//')
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    fatal+=("ldd: ${#missing[@]} libraries not found, e.g. ${missing[*]:0:4}")
  else
    say "ok   ldd: every bundled binary's libraries found"
  fi
  # Opened with dlopen, so not in ldd's list: cuBLASLt is needed, the rest is reported.
  if [ "${SUITE_EMULATED:-0}" != 1 ]; then
    for lib in libcublasLt.so.13 libnccl.so libcudnn.so.9 libnvrtc.so libcudart.so.13; do
      local where
      where=$(find_lib "$lib")
      if [ -n "$where" ]; then
        say "ok   $lib: $where"
      elif [ "$lib" = libcublasLt.so.13 ]; then
        fatal+=("$lib not found (LD_LIBRARY_PATH, ldconfig): every matmul needs it")
      else
        say "note: $lib not found (libcudnn/libnvrtc: cuDNN attention fails; libnccl: see ldd)"
      fi
    done
  fi
  if [ "${#fatal[@]}" -eq 0 ]; then
    bounded "mpirun starts one rank" 20 "$logs/preflight_mpirun.log" "$mpirun_sh" 1 true ||
      fatal+=("mpirun cannot start a rank")
  fi
  # Two quick device binaries: a GPU the binaries cannot use stops the command here; a check
  # that fails is left to the ops section to report.
  if [ "${#fatal[@]}" -eq 0 ]; then
    for t in device_cuda_test cast_test; do
      [ -x "$bin/$t" ] || { fatal+=("$t is not in the bundle"); continue; }
      local tlog=$logs/preflight_$t.log rc
      bounded "$t" 20 "$tlog" "$bin/$t"
      rc=$?
      if [ "$rc" -ne 0 ] && { [ "$rc" -ge 124 ] ||
        grep -qE 'would SKIP|no usable GPU|error while loading|cudaError|CUDA driver' "$tlog"; }
      then
        fatal+=("$t cannot use the GPU ($(why "$rc")):" \
          "$(grep -m1 -E 'FAIL|error' "$tlog" | cut -c 1-200)")
      elif [ "$rc" -ne 0 ]; then
        checks=1
      fi
    done
  fi
  # The byte-level data: prepare_bytes.py reads Debian's fortunes, which the bundle carries.
  if [ "${#fatal[@]}" -eq 0 ] && [ ! -f "$data/bytes_train_000000.bin" ]; then
    if [ ! -d /usr/share/games/fortunes ]; then
      mkdir -p /usr/share/games && ln -s "$bundle/fortunes" /usr/share/games/fortunes
    fi
    bounded "prepare_bytes.py" 30 "$logs/prepare_bytes.log" \
      python3 "$here/tools/prepare_bytes.py" --out-dir "$data" || fatal+=("no byte data")
  fi
  if [ "${#fatal[@]}" -gt 0 ]; then
    local f
    for f in "${fatal[@]}"; do
      say "FAIL preflight: $f"
      failed "${f:0:300}"
    done
    say "FAIL preflight: stopping here: every section needs this"
    return 1
  fi
  if [ "$checks" -ne 0 ]; then
    say "preflight: a device binary failed a check; the sections run"
    return 2
  fi
}
version() {
  if [ -f "$bundle/version.txt" ]; then
    head -c 80 "$bundle/version.txt"
  else
    echo "no version.txt"
  fi
}
# find_lib NAME: where the loader would find NAME (LD_LIBRARY_PATH, then ldconfig's cache).
find_lib() {
  local d
  for d in ${LD_LIBRARY_PATH//:/ }; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return; }
  done
  ldconfig -p 2>&1 | grep -m1 -F "$1" | sed 's/.*=> //'
}

# ---- sections -------------------------------------------------------------------------------

# Each binary under its bound (90 s; ops_vocab_test OPS_VOCAB_LIMIT, 300 s: cuDNN builds its
# graphs at run time), so one hang does not spend the command. ops_vocab_test comes last.
section_ops() {
  local fail=0 t name
  for t in "$bin"/*_test; do
    name=$(basename "$t")
    [ "$name" != ops_vocab_test ] || continue
    bounded "$name" "${OPS_TEST_LIMIT:-90}" "$logs/$name.log" "$t" || fail=1
  done
  bounded ops_vocab_test "${OPS_VOCAB_LIMIT:-300}" "$logs/ops_vocab_test.log" \
    "$bin/ops_vocab_test" || fail=1
  return $fail
}

section_train() {
  local fail=0
  run_script train_gpu_test 150 bash "$here/tests/gpu/train_gpu_test.sh" "$st" \
    "$here/tools/prepare_bytes.py" "$timed_mpirun" || fail=1
  TRAIN_RUN_FLAGS="--device cuda" TRAIN_RUN_WRAPPER="$bin/nccl-hostid" \
    run_script checkpoint_async_test 240 bash "$here/tests/train/checkpoint_async_test.sh" "$st" \
    "$here/tools/prepare_bytes.py" "$timed_mpirun" || fail=1
  return $fail
}

# An NCCL set-up that rank 1 cannot join must end the job, not hang it (see the top).
setup_stall_check() {
  local log=$logs/nccl_setup_stall.log start rc secs
  secs=$(limit 120)
  [ "$secs" -gt 0 ] || { say "FAIL NCCL set-up stall: not started, the section's time is spent"
    failed "NCCL set-up stall: not started"; return 1; }
  start=$(now)
  # shellcheck disable=SC2016  # the inner script expands its own variables, on each rank
  ST_COMM_TIMEOUT=10 timeout -k 10 "$secs" "$mpirun_sh" 2 bash -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export NCCL_SOCKET_IFNAME=st_no_such_if; fi
     exec "$@"' \
    stall "$bin/nccl-hostid" "$st" selftest --device cuda --backend nccl --count 1024 --iters 1 \
    > "$log" 2>&1
  rc=$?
  local took=$(($(now) - start))
  if grep -q "no usable GPU" "$log"; then
    say "FAIL NCCL set-up that one rank cannot join ($took s): no usable GPU"
    failed "NCCL set-up stall: no usable GPU"
    return 1
  fi
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && grep -qi "error" "$log"; then
    say "ok   NCCL set-up that one rank cannot join ($took s, exit $rc):" \
      "$(grep -i -m1 "did not finish within\|error" "$log" | cut -c 1-200)"
    return 0
  fi
  say "FAIL NCCL set-up that one rank cannot join ($took s, $(why "$rc"); 124: it hung)"
  excerpt "$log"
  failed "NCCL set-up stall ($took s, $(why "$rc"))"
  return 1
}

section_streams() {
  local fail=0 t ranks
  for t in collectives_gpu_test unit_streams_gpu_test; do
    for ranks in 1 2; do
      bounded "$t on $ranks ranks" 60 "$logs/${t}_np$ranks.log" \
        "$mpirun_sh" "$ranks" "$bin/nccl-hostid" "$bin/${t}_bin" --device cuda || fail=1
    done
  done
  bounded "public_unit_gpu_test on 4 ranks" 60 "$logs/public_unit_gpu_test_np4.log" \
    "$mpirun_sh" 4 "$bin/nccl-hostid" "$bin/public_unit_gpu_test_bin" --device cuda || fail=1
  setup_stall_check || fail=1
  return $fail
}

section_equivalence() {
  TRAIN_RUN_FLAGS="--device cuda" TRAIN_RUN_WRAPPER="$bin/nccl-hostid" \
    run_script equivalence_test 540 bash "$here/tests/train/equivalence_test.sh" "$st" \
    "$here/tools/prepare_bytes.py" "$timed_mpirun"
}

# d12_run NAME RANKS SECONDS FLAGS...: 20 steps of d12 in bf16 at micro-batch 16 x 1024 under
# a bound of SECONDS, then the loss must fall and the step time is printed.
d12_run() {
  local name=$1 ranks=$2 secs=$3 out
  shift 3
  bounded "$name" "$secs" "$logs/$name.log" "$mpirun_sh" "$ranks" "$bin/nccl-hostid" "$st" \
    train --model d12 --device cuda --data-train "$data/bytes_train_*.bin" --steps 20 \
    --micro-batch 16 --param-dtype bf16 --reduce-dtype bf16 --lr 6e-4 --warmup 5 \
    --metrics "$logs/$name.jsonl" "$@" || return 1
  out=$(python3 - "$logs/$name.jsonl" "$name" 2>&1 <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name = sys.argv[2]
steady = rows[5:] or rows
ms = statistics.median(r["step_ms"] for r in steady)
tps = statistics.median(r["tokens_per_s"] for r in steady)
print(f"{name}: loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f} over {len(rows)} steps, "
      f"step {ms:.1f} ms, {tps:.0f} tokens/s (medians of steps 6-{len(rows)})")
sys.exit(0 if len(rows) == 20 and rows[-1]["loss"] < rows[0]["loss"] else 1)
PY
  ) && { say "ok   $out"; return 0; }
  say "FAIL $name: 20 steps with a falling loss: ${out: -600}"
  failed "$name: not 20 steps with a falling loss"
  return 1
}

# d12_kind KIND: the one-GPU d12 run again with ST_CUDA_ATTENTION=KIND, from the same initial
# weights: every step's loss within 1% of the simple kernels' run (d12_1gpu), and no warning
# that another kind ran instead (cuDNN not loaded, a shape refused).
d12_kind() {
  local kind=$1 out
  ST_CUDA_ATTENTION=$kind d12_run "d12_1gpu_$kind" 1 90 || return 1
  if grep -q "attention kernels run" "$logs/d12_1gpu_$kind.log"; then
    say "FAIL d12_1gpu_$kind: another kind ran: $(grep -m1 "attention kernels run" \
      "$logs/d12_1gpu_$kind.log" | cut -c 1-200)"
    failed "d12_1gpu_$kind: another kind ran"
    return 1
  fi
  out=$(python3 - "$logs/d12_1gpu.jsonl" "$logs/d12_1gpu_$kind.jsonl" "$kind" 2>&1 <<'PY'
import json, sys
simple, other = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(other, simple))
print(f"d12 {sys.argv[3]} vs simple attention: worst step loss difference {worst:.2e} (bound 1e-2)")
sys.exit(0 if len(other) == len(simple) == 20 and worst <= 1e-2 else 1)
PY
  ) && { say "ok   $out"; return 0; }
  say "FAIL d12_1gpu_$kind against simple attention: ${out: -600}"
  failed "d12_1gpu_$kind: losses against simple attention"
  return 1
}

section_d12() {
  local fail=0
  d12_run d12_1gpu 1 90 || fail=1
  # The tiled kernels (kernels/cuda/flash_attention.cu) and cuDNN's (cudnn_attention.cpp).
  d12_kind flash || fail=1
  d12_kind cudnn || fail=1
  return $fail
}

section_d12x4() {
  d12_run d12_4ranks_zero3 4 150 --dp-shard 4 --zero 3
}

section_calibrate() {
  local hw=$logs/gpu_shared.hw table=$logs/validation.md fail=0
  BIN=$bin bounded "measure_gpu.sh" 360 "$logs/calibrate_measure.log" \
    bash "$here/benchmarks/hardware/measure_gpu.sh" "$hw" || return 1
  say "     $hw: $(grep -c '^eff_' "$hw") efficiencies and curves"
  # The table is validate_simulator.sh's standard output; its log, the rest.
  # shellcheck disable=SC2016  # expanded by the inner shell
  SHARDTRAIN=$st LAUNCH_WRAPPER=$bin/nccl-hostid bounded "validate_simulator.sh" 360 \
    "$logs/calibrate_validate.log" bash -c 'out=$1; shift; exec "$@" > "$out"' validate \
    "$table" bash "$here/benchmarks/validate_simulator.sh" --only gpu-measured \
    --hardware "$hw" --steps 4 --rounds 1 || fail=1
  [ -f "$table" ] && head -c 3000 "$table"
  if [ "$(grep -c '^| d[0-9]' "$table" 2>&1)" != 9 ]; then
    say "FAIL validation.md has not 9 rows"
    failed "validation.md has not 9 rows"
    fail=1
  fi
  return $fail
}

section_sanitizer() {
  local fail=0 tool
  if [ -z "$(command -v compute-sanitizer)" ]; then
    say "FAIL compute-sanitizer: not on PATH, nor in /usr/local/cuda/bin"
    failed "no compute-sanitizer"
    return 1
  fi
  for tool in memcheck racecheck synccheck; do
    bounded "$tool ops_vocab_test" "${SANITIZER_RUN_LIMIT:-150}" \
      "$logs/sanitizer_ops_$tool.log" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/ops_vocab_test" || fail=1
    bounded "$tool d6 on 2 ranks" "${SANITIZER_RUN_LIMIT:-150}" "$logs/sanitizer_d6_$tool.log" \
      "$mpirun_sh" 2 "$bin/nccl-hostid" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$st" train --model d6 --device cuda --data-train "$data/bytes_train_*.bin" --steps 3 \
      --micro-batch 2 --dp-shard 2 --zero 3 --param-dtype bf16 --reduce-dtype bf16 || fail=1
  done
  return $fail
}

# ---- the sections asked for, in order ---------------------------------------------------------

for section in "${sections[@]}"; do
  echo "== $section"
  start=$(now)
  left=$((suite_end - start))
  if [ "$left" -lt 20 ]; then
    say "FAIL $section: not run: $left s of SUITE_BUDGET left"
    summary+=("$section: NOT RUN (budget spent)")
    failed "not run: the command's budget was spent"
    status=1
    continue
  fi
  section_end=$((start + ${bound[$section]} * scale))
  [ "$section_end" -le "$suite_end" ] || section_end=$suite_end
  say "$section: up to $((section_end - start)) s"
  "section_$section"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    summary+=("$section: passed ($(($(now) - start)) s)")
    say "$section: passed ($(($(now) - start)) s)"
  else
    summary+=("$section: FAILED ($(($(now) - start)) s)")
    say "$section: FAILED ($(($(now) - start)) s)"
    status=1
    if [ "$section" = preflight ] && [ "$rc" -eq 1 ]; then
      for s in "${sections[@]:1}"; do summary+=("$s: NOT RUN (preflight failed)"); done
      break
    fi
  fi
done
section=
exit "$status"
