/* offload_test.c - AdamW with the optimizer offloaded gives the resident optimizer's bits on
 * the CPU: in place (the CPU's device memory is host RAM) and through the pinned staging a GPU
 * uses (forced here), in one chunk and in 11 chunks of 100 elements (more than the ring of
 * chunks copied ahead, and cut across a parameter), for fp32, bf16 and mixed param / reduce
 * dtypes; the padding between parameters keeps its bits; a step the factors skip changes
 * nothing even when the staging holds garbage (another unit's parameters, on a model). The
 * state moves from the optimizer category to optimizer_host, and the staging (a ring of 4
 * chunks' gradients and parameters) with it. */
#include <stdio.h>
#include <string.h>

#include "tests/optim/offload_run.h"
#include "tests/testing.h"

static offload_result resident, offloaded;

static void check_case(unit_precision p, const offload_case *c) {
  const st_device cpu = device_cpu();
  const offload_case reference = {.offload = 0, .skip_step = c->skip_step};
  CHECK_OK(offload_run(&cpu, p, &reference, &resident));
  const uint64_t state = 3ull * 4 * OFFLOAD_RUN_NUMEL;
  CHECK(resident.allocated.current[MEM_OPTIMIZER] == state);
  CHECK(resident.allocated.current[MEM_OPTIMIZER_HOST] == 0);
  CHECK_OK(offload_run(&cpu, p, c, &offloaded));
  char how[96];
  snprintf(how, sizeof how, "%s/%s offloaded %s, chunks of %lld, skip step %d", dtype_name(p.param),
           dtype_name(p.reduce), c->offload == 1 ? "in place" : "staged", (long long)c->chunk_numel,
           c->skip_step);
  CHECK_MSG(memcmp(resident.master, offloaded.master, sizeof resident.master) == 0 &&
                memcmp(resident.m, offloaded.m, sizeof resident.m) == 0 &&
                memcmp(resident.v, offloaded.v, sizeof resident.v) == 0,
            "%s: master, m or v differ", how);
  CHECK_MSG(memcmp(resident.params, offloaded.params, sizeof resident.params) == 0,
            "%s: parameters (or their padding) differ", how);
  CHECK(offloaded.allocated.current[MEM_OPTIMIZER] == 0);
  CHECK(offloaded.allocated.current[MEM_OPTIMIZER_HOST] == state);
  const uint64_t staging = c->offload == 2 ? offload_run_staging_bytes(p, c) : 0;
  CHECK_MSG(offloaded.optimizer_host_peak == state + staging,
            "%s: optimizer_host peak %llu, want %llu", how,
            (unsigned long long)offloaded.optimizer_host_peak,
            (unsigned long long)(state + staging));
}

static void check_precision(unit_precision p) {
  for (int skip = 0; skip <= 3; skip += 3) { /* 3: the last step, which nothing overwrites */
    check_case(p, &(offload_case){.offload = 1, .skip_step = skip});
    check_case(p, &(offload_case){.offload = 2, .skip_step = skip});
    check_case(p, &(offload_case){.offload = 2, .chunk_numel = 100, .skip_step = skip});
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
