#!/usr/bin/env bash
# nvcc_rewrite_test.sh NVCC - the CUDA emulation's nvcc (tools/cuda_emu/nvcc): each
# `kernel<<<...>>>(args)` becomes a cuda_emu_launch call with the kernel's name, its
# configuration and a body that owns the arguments' values (evaluated at the launch, so that it
# may run later) and calls the kernel with them, whatever the template arguments, line breaks and
# macro continuations around it; the line count stays (compiler messages keep their lines);
# text that only looks like a launch (a shift in an expression) is left alone; and a rewritten
# file, launches inside a macro included, compiles with g++.
set -euo pipefail
nvcc=$1
work=${TEST_TMPDIR:-$(mktemp -d)}
fail=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 1 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}

cat > "$work/sample.cu" <<'CU'
#include <stdint.h>
namespace {
template <typename T, int N>
__global__ void scale(T *x, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * N + (T)(1 << 2);
}
}  // namespace
#define LAUNCH_SCALE(ptr, n) \
  scale<float, 3><<<(unsigned)((n) + 63) / 64, 64, 0, \
                     nullptr>>>(ptr, n); \
  (void)0
void run(float *x, int64_t n, cudaStream_t s) {
  scale<float, 2>
      <<<1, 32, 0, s>>>(x,
                        n);
  LAUNCH_SCALE(x, n);
  scale<float, 1><<<2, 64>>>(x, n);
}
CU
python3 - "$nvcc" "$work/sample.cu" <<'PY' > "$work/results"
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("nvcc", sys.argv[1])
spec = importlib.util.spec_from_loader("nvcc", loader)
nvcc = importlib.util.module_from_spec(spec)
loader.exec_module(nvcc)
text = open(sys.argv[2]).read()
out = nvcc.rewrite(text, sys.argv[2])
print("lines", int(out.count("\n") == text.count("\n")))
print("no_launch_syntax", int("<<<" not in out and ">>>" not in out))
print("shift_kept", int("(1 << 2)" in out))
def launch(callee, config, args):
    return ('cuda_emu_launch("%s", %s, [cuda_emu_args = cuda_emu_arguments_of(&%s)(%s)] '
            '{ std::apply(&%s, cuda_emu_args); })' % (callee, config, callee, args, callee))
flat = " ".join(out.replace("\\\n", " ").split())
print("split", int(launch("scale<float, 2>", "1, 32, 0, s", "x, n") in flat))
macro_config = "(unsigned)((n) + 63) / 64, 64, 0, nullptr"
print("macro", int(launch("scale<float, 3>", macro_config, "ptr, n") in flat))
print("two_args", int(launch("scale<float, 1>", "2, 64", "x, n") in out))
PY
while read -r name value; do check "$name" "$value"; done < "$work/results"
if "$nvcc" -O1 -c "$work/sample.cu" -o "$work/sample.o" 2> "$work/compile.log"; then
  check "the rewritten file compiles" 1
else
  cat "$work/compile.log"
  check "the rewritten file compiles" 0
fi
exit $fail
