/* host_staging.c - the optimizer offload's shared pinned ring of chunk slots (host_staging.h). */
#include "sharding/host_staging.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

void host_staging_init(host_staging *h, const st_device *dev) {
  memset(h, 0, sizeof *h);
  h->dev = dev;
  h->chunk_numel = HOST_STAGING_CHUNK_NUMEL;
}

/* Waits for every copy into or out of a slot recorded so far (events never recorded have
 * finished). */
static st_status drain(const host_staging *h) {
  for (int i = 0; i < h->events; i++) {
    ST_CHECK(event_sync(&h->ready[i]));
    ST_CHECK(event_sync(&h->uploaded[i]));
  }
  return ST_OK;
}

static void release(host_staging *h) {
  mem_free(h->params);
  mem_free(h->grads);
  h->params = h->grads = NULL;
  h->slot_numel = 0;
}

st_status host_staging_reserve(host_staging *h, int64_t slot_numel, size_t grad_size,
                               size_t param_size) {
  for (; h->events < HOST_STAGING_RING; h->events++) {
    ST_CHECK(event_create(h->dev, &h->ready[h->events]));
    st_status status = event_create(h->dev, &h->uploaded[h->events]);
    if (status != ST_OK) {
      event_destroy(&h->ready[h->events]);
      return status;
    }
  }
  if (slot_numel <= h->slot_numel && grad_size <= h->grad_size && param_size <= h->param_size) {
    return ST_OK;
  }
  ST_CHECK(drain(h));
  if (slot_numel < h->slot_numel) slot_numel = h->slot_numel;
  release(h);
  h->grad_size = grad_size > h->grad_size ? grad_size : h->grad_size;
  h->param_size = param_size > h->param_size ? param_size : h->param_size;
  const size_t elements = (size_t)HOST_STAGING_RING * (size_t)slot_numel;
  ST_CHECK(mem_alloc(&h->grads, elements * h->grad_size, MEM_PINNED, MEM_OPTIMIZER_HOST, h->dev));
  ST_CHECK(mem_alloc(&h->params, elements * h->param_size, MEM_PINNED, MEM_OPTIMIZER_HOST, h->dev));
  h->slot_numel = slot_numel;
  return ST_OK;
}

void *host_staging_grads(const host_staging *h, int slot) {
  return (char *)h->grads + (size_t)slot * (size_t)h->slot_numel * h->grad_size;
}

void *host_staging_params(const host_staging *h, int slot) {
  return (char *)h->params + (size_t)slot * (size_t)h->slot_numel * h->param_size;
}

void host_staging_destroy(host_staging *h) {
  (void)drain(h); /* a device that cannot wait has nothing in flight */
  for (int i = 0; i < h->events; i++) {
    event_destroy(&h->ready[i]);
    event_destroy(&h->uploaded[i]);
  }
  release(h);
  memset(h, 0, sizeof *h);
}
