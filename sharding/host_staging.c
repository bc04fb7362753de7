/* host_staging.c - the optimizer offload's shared pinned staging (host_staging.h). */
#include "sharding/host_staging.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

void host_staging_init(host_staging *h, const st_device *dev) {
  memset(h, 0, sizeof *h);
  h->dev = dev;
  h->chunk_numel = HOST_STAGING_CHUNK_NUMEL;
}

/* Grows *buf to `want` bytes, freeing the old buffer first. */
static st_status grow(const host_staging *h, void **buf, size_t *have, size_t want) {
  if (want <= *have) return ST_OK;
  mem_free(*buf);
  *buf = NULL;
  *have = 0;
  ST_CHECK(mem_alloc(buf, want, MEM_PINNED, MEM_OPTIMIZER_HOST, h->dev));
  *have = want;
  return ST_OK;
}

st_status host_staging_reserve(host_staging *h, size_t grad_bytes, size_t param_bytes) {
  for (; h->events < HOST_STAGING_RING; h->events++) {
    ST_CHECK(event_create(h->dev, &h->ready[h->events]));
  }
  ST_CHECK(grow(h, &h->grads, &h->grad_bytes, grad_bytes));
  return grow(h, &h->params, &h->param_bytes, param_bytes);
}

void host_staging_destroy(host_staging *h) {
  for (int i = 0; i < h->events; i++) event_destroy(&h->ready[i]);
  mem_free(h->params);
  mem_free(h->grads);
  memset(h, 0, sizeof *h);
}
