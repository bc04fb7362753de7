/* offload_test.c - AdamW with the optimizer offloaded gives the resident optimizer's bits on
 * the CPU: in place (the CPU's device memory is host RAM) and through the pinned staging a GPU
 * uses (forced here), for fp32, bf16 and mixed param / reduce dtypes. The state moves from the
 * optimizer category to optimizer_host, with the staging (one unit's owned gradients and
 * parameters) only while it updates. */
#include <string.h>

#include "tests/optim/offload_run.h"
#include "tests/testing.h"

static offload_result resident, offloaded;

static void check_precision(unit_precision p) {
  const st_device cpu = device_cpu();
  CHECK_OK(offload_run(&cpu, p, 0, &resident));
  const uint64_t state = 3ull * 4 * OFFLOAD_RUN_NUMEL;
  CHECK(resident.allocated.current[MEM_OPTIMIZER] == state);
  CHECK(resident.allocated.current[MEM_OPTIMIZER_HOST] == 0);
  for (int mode = 1; mode <= 2; mode++) {
    CHECK_OK(offload_run(&cpu, p, mode, &offloaded));
    const char *how = mode == 1 ? "in place" : "staged";
    const char *dtypes[2] = {dtype_name(p.param), dtype_name(p.reduce)};
    CHECK_MSG(memcmp(resident.master, offloaded.master, sizeof resident.master) == 0 &&
                  memcmp(resident.m, offloaded.m, sizeof resident.m) == 0 &&
                  memcmp(resident.v, offloaded.v, sizeof resident.v) == 0,
              "%s/%s offloaded %s: master, m or v differ", dtypes[0], dtypes[1], how);
    CHECK_MSG(memcmp(resident.params, offloaded.params, sizeof resident.params) == 0,
              "%s/%s offloaded %s: parameters differ", dtypes[0], dtypes[1], how);
    CHECK(offloaded.allocated.current[MEM_OPTIMIZER] == 0);
    CHECK(offloaded.allocated.current[MEM_OPTIMIZER_HOST] == state);
    const uint64_t staging =
        mode == 2 ? (uint64_t)OFFLOAD_RUN_NUMEL * (dtype_size(p.param) + dtype_size(p.reduce)) : 0;
    CHECK_MSG(offloaded.optimizer_host_peak == state + staging,
              "%s/%s offloaded %s: optimizer_host peak %llu, want %llu", dtypes[0], dtypes[1], how,
              (unsigned long long)offloaded.optimizer_host_peak,
              (unsigned long long)(state + staging));
  }
  mem_stats left;
  mem_stats_get(&left);
  CHECK(left.live_blocks == 0);
}

int main(void) {
  check_precision((unit_precision){ST_FP32, ST_FP32});
  check_precision((unit_precision){ST_BF16, ST_BF16});
  check_precision((unit_precision){ST_BF16, ST_FP32});
  check_precision((unit_precision){ST_FP32, ST_BF16});
  return test_finish("offload_test");
}
