/* alloc.h - every allocation of the library (host, pinned, device) goes through here.
 *
 * Each block is tagged with a category; current and peak bytes are tracked per category and
 * in total, so the memory planner's prediction can be compared with what was really taken.
 * The tracker is process-wide (one rank = one process) and thread-safe.
 * Test hook: mem_fail_nth(n) makes the n-th allocation from now fail with ST_ERR_OOM.
 */
#ifndef ST_CORE_ALLOC_H
#define ST_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mem_category {
  MEM_PARAMS = 0,      /* low-precision parameters held between steps */
  MEM_GRADS = 1,       /* gradients held between backward and the optimizer */
  MEM_OPTIMIZER = 2,   /* fp32 master weights, Adam m and v */
  MEM_GATHERED = 3,    /* full-unit buffers alive only between gather and release */
  MEM_ACTIVATIONS = 4, /* forward activations kept for backward */
  MEM_COMM = 5,        /* staging and scratch buffers of the collectives */
  MEM_WORKSPACE = 6,   /* everything else: scratch of kernels, loaders, tables */
  /* fp32 master weights, Adam m and v kept in host memory (pinned on a GPU) by the optimizer
   * offload, and its transient staging of a unit's gradients and parameters there: apart from
   * MEM_OPTIMIZER so that the planner can say what a GPU holds and what the host holds. */
  MEM_OPTIMIZER_HOST = 7,
  MEM_CATEGORY_COUNT = 8
} mem_category;

typedef struct mem_stats {
  uint64_t current[MEM_CATEGORY_COUNT];
  uint64_t peak[MEM_CATEGORY_COUNT];
  uint64_t total_current;
  uint64_t total_peak;
  uint64_t live_blocks;
} mem_stats;

/* Allocates `bytes` (64-byte aligned, contents undefined) of `kind` memory on `dev`'s backend
 * (dev may be NULL for MEM_HOST). On failure *out is NULL and the status is ST_ERR_OOM. */
st_status mem_alloc(void **out, size_t bytes, mem_kind kind, mem_category category,
                    const st_device *dev);

/* As mem_alloc, then zero-filled (host kinds only: device memory is zeroed on a stream). */
st_status mem_alloc_zeroed(void **out, size_t bytes, mem_kind kind, mem_category category,
                           const st_device *dev);

/* Frees a block from mem_alloc; NULL is accepted. */
void mem_free(void *ptr);

const char *mem_category_name(mem_category category);

void mem_stats_get(mem_stats *out);
/* Sets every peak to the current value (start of a measured region). */
void mem_reset_peak(void);

/* Test hook: the n-th allocation from now (1 = the next) fails; 0 disables. */
void mem_fail_nth(long n);

/* Test hook: 1 while the failure mem_fail_nth armed has not happened yet (fewer allocations
 * since), 0 once it has or when none is armed: a call that succeeded with its failure fired
 * swallowed an allocation failure. */
int mem_fail_pending(void);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_ALLOC_H */
