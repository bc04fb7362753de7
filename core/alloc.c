/* alloc.c - the tracking allocator, and the public st_memory_live_bytes that reads it. Live
 * blocks are kept in an open-addressing hash table keyed by address (linear probing,
 * backward-shift deletion), so mem_free needs only the pointer. The table itself is
 * bookkeeping, allocated with plain calloc and not counted. */
#include "core/alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct block {
  void *ptr; /* NULL: empty slot */
  size_t bytes;
  const device_backend *backend;
  mem_kind kind;
  mem_category category;
} block;

static pthread_mutex_t tracker_lock = PTHREAD_MUTEX_INITIALIZER;
static block *table;
static size_t table_cap; /* power of two, or 0 before the first allocation */
static mem_stats stats;
static long fail_countdown;

static size_t slot_of(const void *ptr) {
  uint64_t h = (uint64_t)(uintptr_t)ptr;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (size_t)h & (table_cap - 1);
}

static void insert_slot(block b) {
  size_t i = slot_of(b.ptr);
  while (table[i].ptr) i = (i + 1) & (table_cap - 1);
  table[i] = b;
}

/* Keeps the load factor under 1/2. Called with the lock held. */
static st_status ensure_capacity(void) {
  if (table_cap && (stats.live_blocks + 1) * 2 <= table_cap) return ST_OK;
  size_t old_cap = table_cap;
  block *old = table;
  size_t cap = old_cap ? old_cap * 2 : 256;
  block *fresh = calloc(cap, sizeof *fresh);
  if (!fresh) return st_error(ST_ERR_OOM, "out of host memory growing the allocation table");
  table = fresh;
  table_cap = cap;
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].ptr) insert_slot(old[i]);
  }
  free(old);
  return ST_OK;
}

static int injected_failure(void) {
  if (fail_countdown <= 0) return 0;
  return --fail_countdown == 0;
}

const char *mem_category_name(mem_category category) {
  static const char *const names[MEM_CATEGORY_COUNT] = {"params",    "grads",         "optimizer",
                                                        "gathered",  "activations",   "comm",
                                                        "workspace", "optimizer_host"};
  return (unsigned)category < MEM_CATEGORY_COUNT ? names[category] : "invalid";
}

st_status mem_alloc(void **out, size_t bytes, mem_kind kind, mem_category category,
                    const st_device *dev) {
  *out = NULL;
  if ((unsigned)category >= MEM_CATEGORY_COUNT) {
    return st_error(ST_ERR_INVALID_ARG, "memory category %d does not exist", (int)category);
  }
  if ((unsigned)kind > MEM_DEVICE) {
    /* The CUDA backend would return ST_OK without setting the pointer for an unknown kind. */
    return st_error(ST_ERR_INVALID_ARG, "memory kind %d does not exist", (int)kind);
  }
  const device_backend *backend = dev ? dev->backend : &device_backend_cpu;
  if (kind != MEM_HOST && !dev) {
    return st_error(ST_ERR_INVALID_ARG, "pinned or device memory needs a device");
  }
  pthread_mutex_lock(&tracker_lock);
  st_status status = ST_OK;
  if (injected_failure()) {
    status = st_error(ST_ERR_OOM, "injected allocation failure (%zu bytes of %s)", bytes,
                      mem_category_name(category));
    goto done;
  }
  ST_CHECK_GOTO(ensure_capacity(), status, done);
  void *ptr = NULL;
  ST_CHECK_GOTO(backend->raw_alloc(kind, bytes, &ptr), status, done);
  insert_slot((block){ptr, bytes, backend, kind, category});
  stats.live_blocks++;
  stats.current[category] += bytes;
  if (stats.current[category] > stats.peak[category])
    stats.peak[category] = stats.current[category];
  stats.total_current += bytes;
  if (stats.total_current > stats.total_peak) stats.total_peak = stats.total_current;
  *out = ptr;
done:
  pthread_mutex_unlock(&tracker_lock);
  return status;
}

st_status mem_alloc_zeroed(void **out, size_t bytes, mem_kind kind, mem_category category,
                           const st_device *dev) {
  if (kind == MEM_DEVICE && dev && dev->backend->kind != ST_DEVICE_CPU) {
    return st_error(ST_ERR_INVALID_ARG, "zero device memory with stream_memset, not at allocation");
  }
  ST_CHECK(mem_alloc(out, bytes, kind, category, dev));
  memset(*out, 0, bytes);
  return ST_OK;
}

void mem_free(void *ptr) {
  if (!ptr) return;
  pthread_mutex_lock(&tracker_lock);
  size_t i = table_cap ? slot_of(ptr) : 0;
  while (table_cap && table[i].ptr && table[i].ptr != ptr) i = (i + 1) & (table_cap - 1);
  if (!table_cap || table[i].ptr != ptr) {
    pthread_mutex_unlock(&tracker_lock);
    /* Freeing a pointer we never returned is a bug in the caller; refusing keeps the
     * accounting right and the heap intact. */
    st_error(ST_ERR_INTERNAL, "mem_free of an address mem_alloc did not return");
    return;
  }
  block b = table[i];
  table[i].ptr = NULL;
  /* Backward-shift deletion keeps every probe chain unbroken. */
  for (size_t j = (i + 1) & (table_cap - 1); table[j].ptr; j = (j + 1) & (table_cap - 1)) {
    size_t home = slot_of(table[j].ptr);
    int movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      table[i] = table[j];
      table[j].ptr = NULL;
      i = j;
    }
  }
  stats.live_blocks--;
  stats.current[b.category] -= b.bytes;
  stats.total_current -= b.bytes;
  pthread_mutex_unlock(&tracker_lock);
  b.backend->raw_free(b.kind, b.ptr);
}

void mem_stats_get(mem_stats *out) {
  pthread_mutex_lock(&tracker_lock);
  *out = stats;
  pthread_mutex_unlock(&tracker_lock);
}

st_status st_memory_live_bytes(uint64_t *bytes) {
  if (!bytes) return st_error(ST_ERR_INVALID_ARG, "st_memory_live_bytes: bytes is NULL");
  mem_stats now;
  mem_stats_get(&now);
  *bytes = now.total_current;
  return ST_OK;
}

void mem_reset_peak(void) {
  pthread_mutex_lock(&tracker_lock);
  memcpy(stats.peak, stats.current, sizeof stats.peak);
  stats.total_peak = stats.total_current;
  pthread_mutex_unlock(&tracker_lock);
}

void mem_fail_nth(long n) {
  pthread_mutex_lock(&tracker_lock);
  fail_countdown = n > 0 ? n : 0;
  pthread_mutex_unlock(&tracker_lock);
}

int mem_fail_pending(void) {
  pthread_mutex_lock(&tracker_lock);
  const int pending = fail_countdown > 0;
  pthread_mutex_unlock(&tracker_lock);
  return pending;
}
