/* offload_test.c (GPU) - AdamW with the optimizer offloaded from a GPU: the unit's master, m
 * and v live in pinned host memory (category optimizer_host; none in optimizer), its owned
 * gradients are staged down and its updated parameters back up through pinned buffers, and
 * the result equals the CPU's resident optimizer bit for bit (the same host arithmetic), for
 * fp32 and bf16, in one chunk and pipelined in 11 chunks of 100 elements (optim/offload_host.h:
 * copies down ahead of the host through a ring of 4 slots, copies up behind it), and with a
 * skipped step (the factors in device memory; nothing copied back over the parameters or their
 * padding). SKIP without a GPU or without CUDA. */
#include <string.h>

#include "tests/optim/offload_run.h"
#include "tests/testing.h"

static offload_result reference, gpu;

static void check_case(const st_device *dev, unit_precision p, const offload_case *c) {
  const st_device cpu = device_cpu();
  const offload_case resident = {.offload = 0, .skip_step = c->skip_step};
  CHECK_OK(offload_run(&cpu, p, &resident, &reference));
  CHECK_OK(offload_run(dev, p, c, &gpu));
  const uint64_t state = 3ull * 4 * OFFLOAD_RUN_NUMEL;
  const uint64_t staging = offload_run_staging_bytes(p, c);
  CHECK_MSG(memcmp(reference.master, gpu.master, sizeof gpu.master) == 0 &&
                memcmp(reference.m, gpu.m, sizeof gpu.m) == 0 &&
                memcmp(reference.v, gpu.v, sizeof gpu.v) == 0 &&
                memcmp(reference.params, gpu.params, sizeof gpu.params) == 0,
            "%s/%s, chunks of %lld, skip step %d: the GPU's offloaded state differs from the "
            "CPU's",
            dtype_name(p.param), dtype_name(p.reduce), (long long)c->chunk_numel, c->skip_step);
  CHECK(gpu.allocated.current[MEM_OPTIMIZER] == 0);
  CHECK(gpu.allocated.current[MEM_OPTIMIZER_HOST] == state);
  CHECK(gpu.optimizer_host_peak == state + staging);
}

static void check_precision(const st_device *dev, unit_precision p) {
  for (int skip = 0; skip <= 3; skip += 3) { /* 3: the last step, which nothing overwrites */
    check_case(dev, p, &(offload_case){.offload = 1, .skip_step = skip});
    check_case(dev, p, &(offload_case){.offload = 1, .chunk_numel = 100, .skip_step = skip});
  }
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
