# shellcheck shell=bash disable=SC2154  # the suite's settings: set by run_gpu_suite.sh
# suite_preflight.sh - sourced by tests/gpu/run_gpu_suite.sh: the preflight section, which stops
# the command at once where nothing else could pass.

# ---- preflight ------------------------------------------------------------------------------

# Stops the command (status 1) where nothing else could pass: no GPU, a missing library, no
# mpirun, a device binary that cannot use the GPU. A device binary's failed check, or a check
# the section's time left no room for, fails the preflight but lets the sections run (status 2).
# What is only reported: "note".
section_preflight() {
  local log=$logs/preflight.log fatal=() t lib checks=0 secs rc
  say "bundle $(version); host ${HOSTNAME:-unknown}; SUITE_BUDGET $budget s"
  if [ "${SUITE_EMULATED:-0}" = 1 ]; then
    say "note: the CUDA emulation (SUITE_EMULATED=1): nvidia-smi and the libraries not checked"
  elif [ -z "$(command -v nvidia-smi)" ]; then
    fatal+=("no nvidia-smi on PATH")
  else
    # Each nvidia-smi call 15 s at most (a first call on a GPU without persistence mode takes
    # seconds to initialise the driver).
    secs=$(limit 15)
    [ "$secs" -gt 0 ] || secs=1
    waited "$log" timeout -k 2 "$secs" nvidia-smi -L
    rc=$?
    if [ "$rc" -ne 0 ] || ! grep -q '^GPU ' "$log"; then
      fatal+=("nvidia-smi -L lists no GPU ($(why "$rc" "$secs")): $(head -c 300 "$log")")
    else
      say "$(head -n 2 "$log" | tr '\n' ' ')"
      secs=$(limit 15)
      [ "$secs" -gt 0 ] || secs=1
      waited "$logs/preflight_smi.log" timeout -k 2 "$secs" nvidia-smi \
        --query-gpu=name,driver_version,persistence_mode,memory.used,memory.total \
        --format=csv,noheader
      rc=$?
      local note=
      [ "$rc" -eq 0 ] || note=" ($(why "$rc" "$secs"))"
      say "name, driver, persistence mode, memory used, total$note:" \
        "$(head -n 2 "$logs/preflight_smi.log" | tr '\n' ' ' | cut -c 1-300)"
    fi
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
  # Opened with dlopen, so not in ldd's list: cuBLASLt is needed, the rest is reported. Looked
  # for by soname, the name dlopen asks for.
  if [ "${SUITE_EMULATED:-0}" != 1 ]; then
    for lib in libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13 libcudart.so.13; do
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
  # A run the preflight's time left no room for (bounded's 200) is a failure, never a stop.
  if [ "${#fatal[@]}" -eq 0 ]; then
    bounded "mpirun starts one rank" 20 "$logs/preflight_mpirun.log" "$mpirun_sh" 1 true
    case $? in
      0) ;;
      200) checks=1 ;;
      *) fatal+=("mpirun cannot start a rank: $(grep -m1 -v '^[-[:space:]]*$' \
        "$logs/preflight_mpirun.log" | cut -c 1-200)") ;;
    esac
  fi
  # Two quick device binaries: a GPU the binaries cannot use stops the command here; a check
  # that fails is left to the ops section to report.
  if [ "${#fatal[@]}" -eq 0 ]; then
    for t in device_cuda_test cast_test; do
      [ -x "$bin/$t" ] || { fatal+=("$t is not in the bundle"); continue; }
      local tlog=$logs/preflight_$t.log
      bounded "$t" 20 "$tlog" "$bin/$t"
      rc=$?
      if [ "$rc" -eq 200 ]; then
        checks=1
      elif [ "$rc" -ne 0 ] && { [ "$rc" -ge 124 ] ||
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
      python3 "$here/tools/prepare_bytes.py" --out-dir "$data"
    case $? in
      0) ;;
      200) checks=1 ;;
      *) fatal+=("no byte data") ;;
    esac
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
    say "preflight: a check failed or was not started; the sections run"
    return 2
  fi
}
# find_lib SONAME: where the loader would find SONAME (LD_LIBRARY_PATH, then ldconfig's cache).
find_lib() {
  local d
  for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return; }
  done
  ldconfig -p 2>&1 | grep -m1 -F "$1 " | sed 's/.*=> //'
}
