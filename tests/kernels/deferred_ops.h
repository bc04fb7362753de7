/* deferred_ops.h - the CPU kernels queued on the lazy device's streams (tests/core/lazy_device.h)
 * instead of run when called: each op's arguments are copied (tensors by value, the AdamW step
 * and its segments) into a host function that runs the CPU backend's op when the stream reaches
 * it, as a GPU runs a launched kernel. A model on the lazy device whose backend takes this table
 * (kernel_backend.ops, set after gpt_create) then runs every op of its step in stream order: a
 * kernel on one stream that does not wait for another stream's kernel reads what is not written
 * yet, or overwrites what is not read yet. */
#ifndef ST_TESTS_KERNELS_DEFERRED_OPS_H
#define ST_TESTS_KERNELS_DEFERRED_OPS_H

#include "kernels/backend_ops.h"

/* The table: the CPU's facts and ops, each deferred. */
const kernel_ops *deferred_ops(void);

/* The first failure of a deferred op since the last call (ST_OK: none), which its caller could
 * not see: the op had returned ST_OK when it was queued. Clears it. */
st_status deferred_ops_status(void);

#endif /* ST_TESTS_KERNELS_DEFERRED_OPS_H */
