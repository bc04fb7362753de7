/* unit_streams.h - the streams, communicators, buffer pool and optimizer-offload staging that the
 * units of one model share (DESIGN.md, "Streams and events"; the schedule is in unit_policy.h):
 *
 *   C  compute: the caller's stream, on which it computes with the gathered parameters and
 *      produces the gradients (owned by the caller, e.g. the GPT model);
 *   G  gather: the parameters' all-gathers, on a duplicate of the shard group's communicator;
 *   R  reduce: the gradients' reduce-scatter, the replicate all-reduce and stage 0's all-gather
 *      of the reduced shards, on duplicates of the shard and replicate communicators.
 *
 * Separate communicators keep a gather from queueing behind a reduction (one communicator runs
 * its collectives one after another). The streams wait for each other's events, never for the
 * host; the host waits only in unit_streams_step_end (once per step) and, as the watchdog, over
 * the collectives in flight. The mesh's own communicators (groups) carry the training step's
 * scalars (ordered on C; the model's step end drains them) and the host-synchronous collectives
 * (exports).
 *
 * Every wait of C on communication, the units' and their owner's (the tp sums, the step's
 * scalars), is bracketed by `exposure`'s event pairs; unit_streams_step_end sums them into
 * comm_exposed_ms (comm_exposure.h). */
#ifndef ST_SHARDING_UNIT_STREAMS_H
#define ST_SHARDING_UNIT_STREAMS_H

#include "core/device.h"
#include "sharding/buffer_pool.h"
#include "sharding/comm.h"
#include "sharding/comm_exposure.h"
#include "sharding/host_staging.h"

/* The groups a unit talks on; each may have size 1. */
typedef struct unit_groups {
  comm *shard;     /* S ranks holding the shards of this unit */
  comm *replicate; /* R ranks holding the same shard */
} unit_groups;

typedef struct unit_streams {
  const st_device *dev;
  const st_stream *compute; /* C (not owned) */
  st_stream gather, reduce; /* G and R */
  unit_groups groups;       /* the mesh's communicators (not owned) */
  comm *gather_comm;        /* duplicate of groups.shard for G; NULL without one */
  comm *reduce_comm;        /* duplicate of groups.shard for R; NULL without one */
  comm *replicate_comm;     /* duplicate of groups.replicate for R; NULL below 2 ranks */
  buffer_pool pool;         /* the units' transient full-unit buffers */
  host_staging offload;     /* the offloaded optimizer's pinned copies of one unit's range */
  comm_exposure exposure;   /* C's waits on communication since the last step end */
  double comm_exposed_ms;   /* their sum up to the last unit_streams_step_end */
} unit_streams;

/* groups may be NULL (one rank). Collective over the groups (the duplicates). */
st_status unit_streams_create(unit_streams *s, const st_device *dev, const st_stream *compute,
                              const unit_groups *groups);
/* Frees everything it created (NULL streams' fields are accepted: a failed create). */
void unit_streams_destroy(unit_streams *s);

/* The host's one wait of a step: the streams finish their work, the watchdog drains the
 * collectives ordered on them, and comm_exposed_ms becomes the time C waited on communication
 * since the previous one. The pool keeps its buffers for the next step. */
st_status unit_streams_step_end(unit_streams *s);

#endif /* ST_SHARDING_UNIT_STREAMS_H */
