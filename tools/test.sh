#!/usr/bin/env bash
# The README's test command: installs what is missing, then runs every test twice and ends
# with one line "N passed, N failed" counted from Bazel's per-target results:
#   1. the whole suite, optimised, with CUDA detected if a toolkit is present;
#   2. the suite under AddressSanitizer + UndefinedBehaviorSanitizer (--config=asan), but the
#      tests tagged sanitizer_skip (scripts, and whole runs' numbers whose code the C tests
#      run under the sanitizers already: the BUILD files say which and why),
#      built CPU-only where a toolkit exists (no GPU runs here, so compiling the CUDA code
#      under the sanitizers would check nothing and cost minutes): what a login node without
#      the toolkit builds, and where the tests tagged gpu must say SKIP, not fail, in its own
#      output base. (Until 2026-11-27 a third pass built everything CPU-only and optimised
#      again just to run those: its cold build pushed the clean-clone CI to 19 minutes.)
# Before them, every shell script git tracks goes through shellcheck's warnings (the GPU suite's
# scripts run only on a GPU machine, where a typo costs device time), counted as one check.
# Extra arguments are passed to every `bazel test` (e.g. a target pattern's filters).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
bash tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run() {
  echo "== bazel $*" | tee -a "$log"
  local out rc
  out=$(mktemp)
  bazel "$@" > "$out" 2>&1
  rc=$?
  cat "$out" >> "$log"
  if [ "$rc" -eq 0 ]; then
    grep -E '^(//|Executed|ERROR|FAIL)' "$out"
  else # the whole output: the compiler's or sanitizer's words, the failed tests' logs
    cat "$out"
    status=1
  fi
  rm -f "$out"
}

# The lint's verdict as one per-target line of the log, counted with Bazel's below.
lint_scripts() {
  local scripts out
  mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
  if out=$(shellcheck -S warning "${scripts[@]}" 2>&1); then
    echo "//:shellcheck PASSED (${#scripts[@]} scripts)" | tee -a "$log"
  else
    echo "$out"; echo "//:shellcheck FAILED" | tee -a "$log"
  fi
}
lint_scripts

run test //... "$@"
# The CPU-only build is a separate configuration only where a CUDA toolkit was detected.
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  # In another output base, the bazel-* links of the default one are plain directories that
  # //... would descend into, so name the project's packages instead; and these runs must not
  # repoint those links at themselves (--symlink_prefix=/ makes none), or the next default run
  # would walk into them.
  packages=$(find . -name BUILD -not -path './bazel-*' -not -path './third_party/*' \
    | cut -d/ -f2 | sort -u | grep -v '^BUILD$' | sed 's|.*|//&/...|')
  cpu_only=(--output_base="${HOME:-/root}/.cache/shardtrain-nocuda")
  run "${cpu_only[@]}" test --config=nocuda --config=asan --test_tag_filters=-sanitizer_skip \
    --symlink_prefix=/ $packages "$@"
else
  run test --config=asan --test_tag_filters=-sanitizer_skip //... "$@"
fi

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE|FAILED TO BUILD)' "$log")
# A broken build prints no per-target line: count it, and never report a run without tests.
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
