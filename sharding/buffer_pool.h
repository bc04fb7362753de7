/* buffer_pool.h - the transient full-unit buffers (gathered parameters, full gradients, fp32
 * compute copies), handed back when their use ends, handed out again only after the work that
 * last read them, and kept from step to step.
 *
 * buffer_pool_put records an event on each stream that read the buffer (its last readers) and
 * keeps the buffer; buffer_pool_get hands a kept buffer of the same size and category to a
 * stream that first waits for those events: no host wait, and, once a step has run, no
 * allocation (on a GPU an allocation or a free synchronises the device). Every buffer comes
 * from mem_alloc (device memory, the caller's category), so the allocator's accounting and its
 * failure injection cover the pool; a kept buffer still counts in its category.
 *
 * The bound: for each size, the pool holds (in use and kept) as many buffers as were ever in use
 * at once, never more: a get allocates only when every buffer of its size is in use. So what it
 * holds is the sum over sizes of the most buffers of that size in use at once, which is what the
 * memory planner predicts for the category (engine/plan/planner.c walks the step's gets and puts
 * by size), and a step that repeats an earlier one allocates nothing. Nothing is freed before
 * buffer_pool_destroy: the pool owns the buffers it keeps; the caller owns a buffer from get
 * until put. */
#ifndef ST_SHARDING_BUFFER_POOL_H
#define ST_SHARDING_BUFFER_POOL_H

#include <stddef.h>

#include "core/alloc.h"
#include "core/device.h"

/* At most this many streams read a buffer before it is handed back (compute and reduce). */
#define BUFFER_POOL_MAX_READERS 2

typedef struct pool_entry {
  void *ptr;
  size_t bytes;
  mem_category category;
  st_event last_use[BUFFER_POOL_MAX_READERS];
  int readers;
} pool_entry;

typedef struct buffer_pool {
  const st_device *dev;
  pool_entry *entries; /* kept buffers */
  int count, capacity;
  long allocations; /* buffers allocated so far (tests count them per step) */
} buffer_pool;

void buffer_pool_init(buffer_pool *pool, const st_device *dev);
/* Frees every kept buffer; the streams that read them must have been synchronised. */
void buffer_pool_destroy(buffer_pool *pool);

/* A buffer of exactly `bytes` in `category` for work on `user`: a kept one, after `user` waits
 * for its last readers, else a new one (device memory; ST_ERR_OOM as mem_alloc). */
st_status buffer_pool_get(buffer_pool *pool, size_t bytes, mem_category category,
                          const st_stream *user, void **out);

/* Hands back a buffer from buffer_pool_get (NULL is accepted) after the work enqueued so far on
 * `readers` (1 to BUFFER_POOL_MAX_READERS streams). It allocates nothing (get made the room to
 * keep it) and never fails: a buffer it cannot keep (an event that could not be created or
 * recorded) is freed once the host has synchronised its readers. */
void buffer_pool_put(buffer_pool *pool, void *ptr, size_t bytes, mem_category category,
                     const st_stream *const *readers, int n_readers);

#endif /* ST_SHARDING_BUFFER_POOL_H */
