/* unit_streams.c - creating and draining a model's gather and reduce lanes (unit_streams.h). */
#include "sharding/unit_streams.h"

#include <string.h>

#include "core/error.h"

static st_status create(unit_streams *s, const unit_groups *groups) {
  ST_CHECK(stream_create(s->dev, &s->gather));
  ST_CHECK(stream_create(s->dev, &s->reduce));
  if (!groups) return ST_OK;
  s->groups = *groups;
  if (groups->shard) {
    ST_CHECK(comm_dup(groups->shard, "gather", &s->gather_comm));
    ST_CHECK(comm_dup(groups->shard, "reduce", &s->reduce_comm));
  }
  if (groups->replicate && comm_size(groups->replicate) > 1) {
    ST_CHECK(comm_dup(groups->replicate, "reduce", &s->replicate_comm));
  }
  return ST_OK;
}

st_status unit_streams_create(unit_streams *s, const st_device *dev, const st_stream *compute,
                              const unit_groups *groups) {
  memset(s, 0, sizeof *s);
  s->dev = dev;
  s->compute = compute;
  buffer_pool_init(&s->pool, dev);
  host_staging_init(&s->offload, dev);
  comm_exposure_init(&s->exposure, dev, compute);
  st_status status = create(s, groups);
  if (status != ST_OK) unit_streams_destroy(s);
  return status;
}

void unit_streams_destroy(unit_streams *s) {
  comm_destroy(s->replicate_comm);
  comm_destroy(s->reduce_comm);
  comm_destroy(s->gather_comm);
  if (s->dev) buffer_pool_destroy(&s->pool);
  host_staging_destroy(&s->offload);
  comm_exposure_destroy(&s->exposure);
  stream_destroy(&s->reduce);
  stream_destroy(&s->gather);
  memset(s, 0, sizeof *s);
}

st_status unit_streams_step_end(unit_streams *s) {
  /* The watchdog first: a collective that never finishes is reported, not waited for. */
  comm *comms[3] = {s->gather_comm, s->reduce_comm, s->replicate_comm};
  for (int i = 0; i < 3; i++) {
    if (comms[i]) ST_CHECK(comm_drain(comms[i]));
  }
  const st_stream *streams[3] = {s->compute, &s->gather, &s->reduce};
  for (int i = 0; i < 3; i++) ST_CHECK(stream_sync(streams[i]));
  return comm_exposure_collect(&s->exposure, &s->comm_exposed_ms);
}
