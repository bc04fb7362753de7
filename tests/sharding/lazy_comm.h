/* lazy_comm.h - a communicator with NCCL's stream order on the lazy device
 * (tests/core/lazy_device.h), over another communicator of the same group that moves the data:
 * each collective is queued on the stream it is ordered on as a host function that runs the
 * inner collective (blocking) when the stream reaches it, followed by the completion event that
 * comm_order_after makes later streams wait for, as NCCL's. A collective that does not wait for
 * its input's producers, or a reader that does not wait for a collective, then sees stale data;
 * and a collective ordered on one stream while others of the same communicator are still queued
 * on another fails (NCCL keeps a communicator's order only on one stream, so the ranks could
 * reach them in different orders): the next wait on the communicator returns the error. The host
 * drives the device when it waits (comm_wait runs the stream up to the event). */
#ifndef ST_TESTS_SHARDING_LAZY_COMM_H
#define ST_TESTS_SHARDING_LAZY_COMM_H

#include "core/device.h"
#include "sharding/comm.h"

/* A communicator over `inner` (its group, name and ranks; the new one owns and destroys it),
 * ordered on streams of `dev`, which must outlive it. */
st_status lazy_comm_create(comm **out, const st_device *dev, comm *inner);

#endif /* ST_TESTS_SHARDING_LAZY_COMM_H */
