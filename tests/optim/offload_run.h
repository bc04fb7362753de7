/* offload_run.h - one unit's AdamW steps, resident or with the optimizer offloaded, for the
 * offload tests (tests/optim/offload_test.c on the CPU, tests/gpu/offload_test.c on a GPU):
 * a stage-0 unit of a 2-D and a 1-D parameter (so weight decay applies to one of them; the
 * 1-D one is 30 elements, padded to 32, so the range has padding that AdamW must not write),
 * fixed initial values (the padding's included) and gradients, three steps, then every byte of
 * its state read back. */
#ifndef ST_TESTS_OPTIM_OFFLOAD_RUN_H
#define ST_TESTS_OPTIM_OFFLOAD_RUN_H

#include <stdint.h>

#include "core/alloc.h"
#include "core/device.h"
#include "sharding/unit.h"

#define OFFLOAD_RUN_NUMEL 1088 /* 32 x 33 + 32, padded to 16 */

typedef struct offload_result {
  float master[OFFLOAD_RUN_NUMEL], m[OFFLOAD_RUN_NUMEL], v[OFFLOAD_RUN_NUMEL];
  uint8_t params[OFFLOAD_RUN_NUMEL * 4]; /* in the param dtype */
  mem_stats allocated;                   /* after allocation, before the steps */
  uint64_t optimizer_host_peak;          /* during the steps */
} offload_result;

typedef struct offload_case {
  int offload; /* 0 resident, 1 offloaded (staging as the device decides), 2 offloaded with the
                  staging forced on (a GPU's path, on any device) */
  int64_t chunk_numel; /* the staging's chunks (host_staging.h); 0: the default */
  int skip_step;       /* 0: none; else the step whose factors (in device memory, as the
                          training step's) say skip, the staging filled with garbage before it */
} offload_case;

/* The pinned staging a staged run of `c` holds (sharding/host_staging.h's contract): a ring of
 * 4 slots, each the smaller of a chunk (2^20 elements unless c says) and the unit's range, of
 * gradients and parameters. */
uint64_t offload_run_staging_bytes(unit_precision precision, const offload_case *c);

/* One run of `c`. The allocator's peaks are reset. */
st_status offload_run(const st_device *dev, unit_precision precision, const offload_case *c,
                      offload_result *out);

#endif /* ST_TESTS_OPTIM_OFFLOAD_RUN_H */
