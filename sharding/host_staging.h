/* host_staging.h - the pinned host buffers through which an offloaded optimizer updates a unit's
 * owned range where device memory is not host memory (unit.h, "Optimizer offload"): one pair,
 * gradients and parameters, shared by the units of a model (unit_streams), grown to the largest
 * request and kept from step to step. A pinned allocation pins pages, and on a GPU its free
 * synchronises the device: done once, not once per unit per step.
 *
 * Growing frees the old buffer before allocating the new one, so what it holds never exceeds the
 * largest request: one unit's owned gradients and parameters, which the memory planner counts in
 * MEM_OPTIMIZER_HOST.
 *
 * The update runs through them chunk by chunk (optim/offload_host.c): chunk_numel elements at a
 * time, with a ring of HOST_STAGING_RING events marking each chunk's gradients arrived, so that
 * the copies of the next chunks down and of the last ones up overlap the host's update. */
#ifndef ST_SHARDING_HOST_STAGING_H
#define ST_SHARDING_HOST_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"

enum {
  HOST_STAGING_RING = 4,              /* chunks whose gradients are copied down ahead of the host */
  HOST_STAGING_CHUNK_NUMEL = 1 << 20, /* elements per chunk: 2-4 MiB of gradients */
};

typedef struct host_staging {
  const st_device *dev;
  void *grads, *params; /* pinned host memory, category MEM_OPTIMIZER_HOST */
  size_t grad_bytes, param_bytes;
  int64_t chunk_numel; /* HOST_STAGING_CHUNK_NUMEL; tests set fewer to cut small units */
  st_event ready[HOST_STAGING_RING];
  int events; /* how many of ready[] exist (all, after the first reserve) */
} host_staging;

void host_staging_init(host_staging *h, const st_device *dev);

/* Makes grads hold at least grad_bytes and params at least param_bytes, and creates the events
 * on first use. The contents are not kept across a call that grows them. On failure a buffer
 * may be gone (its size 0). */
st_status host_staging_reserve(host_staging *h, size_t grad_bytes, size_t param_bytes);

void host_staging_destroy(host_staging *h);

#endif /* ST_SHARDING_HOST_STAGING_H */
