/* buffer_pool.c - transient buffers reused after their last readers' events and kept from step
 * to step (buffer_pool.h). */
#include "sharding/buffer_pool.h"

#include <string.h>

#include "core/error.h"

void buffer_pool_init(buffer_pool *pool, const st_device *dev) {
  memset(pool, 0, sizeof *pool);
  pool->dev = dev;
}

static void drop_events(pool_entry *e) {
  for (int r = 0; r < e->readers; r++) event_destroy(&e->last_use[r]);
  e->readers = 0;
}

/* Removes entry i, keeping the others (order does not matter). */
static void remove_entry(buffer_pool *pool, int i) {
  drop_events(&pool->entries[i]);
  pool->entries[i] = pool->entries[--pool->count];
}

void buffer_pool_destroy(buffer_pool *pool) {
  while (pool->count > 0) {
    void *ptr = pool->entries[pool->count - 1].ptr;
    remove_entry(pool, pool->count - 1);
    mem_free(ptr);
  }
  mem_free(pool->entries);
  memset(pool, 0, sizeof *pool);
}

/* Makes the table hold at least `needed` entries. */
static st_status make_room(buffer_pool *pool, long needed) {
  if (needed <= pool->capacity) return ST_OK;
  int capacity = pool->capacity ? pool->capacity : 8;
  while (capacity < needed) capacity *= 2;
  pool_entry *grown = NULL;
  ST_CHECK(
      mem_alloc((void **)&grown, (size_t)capacity * sizeof *grown, MEM_HOST, MEM_WORKSPACE, NULL));
  if (pool->count) memcpy(grown, pool->entries, (size_t)pool->count * sizeof *grown);
  mem_free(pool->entries);
  pool->entries = grown;
  pool->capacity = capacity;
  return ST_OK;
}

st_status buffer_pool_get(buffer_pool *pool, size_t bytes, mem_category category,
                          const st_stream *user, void **out) {
  *out = NULL;
  for (int i = 0; i < pool->count; i++) {
    pool_entry *e = &pool->entries[i];
    if (e->bytes != bytes || e->category != category) continue;
    for (int r = 0; r < e->readers; r++) ST_CHECK(stream_wait_event(user, &e->last_use[r]));
    *out = e->ptr;
    remove_entry(pool, i);
    return ST_OK;
  }
  /* Room to keep every buffer the pool has allocated, made before the new one exists: so put
   * never needs memory of its own, and a failure here reaches the caller. */
  ST_CHECK(make_room(pool, pool->allocations + 1));
  ST_CHECK(mem_alloc(out, bytes, MEM_DEVICE, category, pool->dev));
  pool->allocations++;
  return ST_OK;
}

static st_status record_readers(pool_entry *e, const st_device *dev,
                                const st_stream *const *readers, int n_readers) {
  for (; e->readers < n_readers; e->readers++) {
    st_event *ev = &e->last_use[e->readers];
    ST_CHECK(event_create(dev, ev));
    st_status status = event_record(ev, readers[e->readers]);
    if (status != ST_OK) {
      event_destroy(ev);
      return status;
    }
  }
  return ST_OK;
}

void buffer_pool_put(buffer_pool *pool, void *ptr, size_t bytes, mem_category category,
                     const st_stream *const *readers, int n_readers) {
  if (!ptr) return;
  pool_entry e = {.ptr = ptr, .bytes = bytes, .category = category};
  /* The table has room for every buffer get allocated; a buffer from elsewhere may not fit. */
  if (pool->count < pool->capacity && record_readers(&e, pool->dev, readers, n_readers) == ST_OK) {
    pool->entries[pool->count++] = e;
    return;
  }
  /* It cannot be kept: free it once its readers are done. */
  drop_events(&e);
  for (int r = 0; r < n_readers; r++) (void)stream_sync(readers[r]);
  mem_free(ptr);
}
