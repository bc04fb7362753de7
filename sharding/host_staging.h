/* host_staging.h - the pinned host buffers through which an offloaded optimizer updates the
 * units' owned ranges where device memory is not host memory (unit.h, "Optimizer offload"): a
 * ring of HOST_STAGING_RING slots, each room for one chunk's gradients and parameters, shared by
 * the units of a model (unit_streams) and kept from step to step. A pinned allocation pins
 * pages, and on a GPU its free synchronises the device: done once, not once per unit per step.
 *
 * The update runs through it chunk by chunk, over all the units of a step as one sequence
 * (optim/offload_host.c): chunk k's gradients come down into slot k % RING (ready[slot] marks
 * them arrived), the host updates them, and its parameters go up from that slot (uploaded[slot]
 * marks them gone) while the next units' gradients come down into the others. So the memory is
 * RING chunks whatever the units' sizes, and nothing waits at a unit's boundary.
 *
 * Growing waits for every copy a slot may still take part in, frees the old buffers and
 * allocates the new ones, so what the ring holds never exceeds the largest request, which the
 * memory planner counts in MEM_OPTIMIZER_HOST. */
#ifndef ST_SHARDING_HOST_STAGING_H
#define ST_SHARDING_HOST_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"

enum {
  HOST_STAGING_RING = 4,              /* slots: chunks in flight between device and host */
  HOST_STAGING_CHUNK_NUMEL = 1 << 20, /* elements per chunk: 2-4 MiB of gradients */
};

typedef struct host_staging {
  const st_device *dev;
  void *grads, *params; /* pinned host memory, category MEM_OPTIMIZER_HOST: RING slots each */
  int64_t slot_numel;   /* elements per slot (the stride of both rings); 0 before the first */
  size_t grad_size, param_size; /* bytes per element of the slots' gradients and parameters */
  int64_t chunk_numel;          /* HOST_STAGING_CHUNK_NUMEL; tests set fewer to cut small units */
  st_event ready[HOST_STAGING_RING];    /* a slot's gradients have arrived */
  st_event uploaded[HOST_STAGING_RING]; /* a slot's parameters have been copied out */
  int events;                           /* how many of each exist (all, after the first reserve) */
} host_staging;

void host_staging_init(host_staging *h, const st_device *dev);

/* Makes every slot hold at least slot_numel elements of gradients of grad_size bytes and of
 * parameters of param_size bytes, and creates the events on first use. Growing first waits for
 * the copies recorded on the slots' events; the contents are not kept. On failure a buffer may
 * be gone (slot_numel then 0). */
st_status host_staging_reserve(host_staging *h, int64_t slot_numel, size_t grad_size,
                               size_t param_size);

/* Slot `slot`'s gradients or parameters. */
void *host_staging_grads(const host_staging *h, int slot);
void *host_staging_params(const host_staging *h, int slot);

/* Waits for the copies recorded on the slots' events, then frees everything. */
void host_staging_destroy(host_staging *h);

#endif /* ST_SHARDING_HOST_STAGING_H */
