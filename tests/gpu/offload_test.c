/* offload_test.c (GPU) - AdamW with the optimizer offloaded from a GPU: the unit's master, m
 * and v live in pinned host memory (category optimizer_host; none in optimizer), its owned
 * gradients are staged down and its updated parameters back up through pinned buffers, and
 * the result equals the CPU's resident optimizer bit for bit (the same host arithmetic), for
 * fp32 and bf16. SKIP without a GPU or without CUDA. */
#include <string.h>

#include "tests/optim/offload_run.h"
#include "tests/testing.h"

static offload_result reference, gpu;

static void check_precision(const st_device *dev, unit_precision p) {
  const st_device cpu = device_cpu();
  CHECK_OK(offload_run(&cpu, p, 0, &reference));
  CHECK_OK(offload_run(dev, p, 1, &gpu));
  const uint64_t state = 3ull * 4 * OFFLOAD_RUN_NUMEL;
  const uint64_t staging =
      (uint64_t)OFFLOAD_RUN_NUMEL * (dtype_size(p.param) + dtype_size(p.reduce));
  CHECK_MSG(memcmp(reference.master, gpu.master, sizeof gpu.master) == 0 &&
                memcmp(reference.m, gpu.m, sizeof gpu.m) == 0 &&
                memcmp(reference.v, gpu.v, sizeof gpu.v) == 0 &&
                memcmp(reference.params, gpu.params, sizeof gpu.params) == 0,
            "%s/%s: the GPU's offloaded state differs from the CPU's", dtype_name(p.param),
            dtype_name(p.reduce));
  CHECK(gpu.allocated.current[MEM_OPTIMIZER] == 0);
  CHECK(gpu.allocated.current[MEM_OPTIMIZER_HOST] == state);
  CHECK(gpu.optimizer_host_peak == state + staging);
}

int main(void) {
  st_device dev;
  if (device_cuda_count() == 0 || device_select("cuda", 0, &dev) != ST_OK) {
    return test_skip("offload_test", "no usable GPU");
  }
  check_precision(&dev, (unit_precision){ST_FP32, ST_FP32});
  check_precision(&dev, (unit_precision){ST_BF16, ST_BF16});
  return test_finish("offload_test");
}
