/* comm_exposure.c - event pairs around the compute stream's waits on communication, summed once
 * per step (comm_exposure.h). */
#include "sharding/comm_exposure.h"

#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

/* Pairs of the pool's first growth: more than a small model's step needs. */
#define COMM_EXPOSURE_FIRST_PAIRS 64

void comm_exposure_init(comm_exposure *x, const st_device *dev, const st_stream *stream) {
  memset(x, 0, sizeof *x);
  x->dev = dev;
  x->stream = stream;
}

static void destroy_events(st_event *events, int from, int to) {
  for (int i = from; i < to; i++) event_destroy(&events[i]);
}

void comm_exposure_destroy(comm_exposure *x) {
  if (x->events) destroy_events(x->events, 0, 2 * x->capacity);
  mem_free(x->events);
  memset(x, 0, sizeof *x);
}

/* Doubles the pool: the old events move over, the new ones are created. On a failure the pool
 * is left as it was. */
static st_status grow(comm_exposure *x) {
  const int capacity = x->capacity ? 2 * x->capacity : COMM_EXPOSURE_FIRST_PAIRS;
  st_event *events = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&events, 2 * (size_t)capacity * sizeof *events, MEM_HOST,
                            MEM_WORKSPACE, NULL));
  const int kept = 2 * x->capacity;
  for (int i = kept; i < 2 * capacity; i++) {
    st_status status = event_create_timed(x->dev, &events[i]);
    if (status != ST_OK) {
      destroy_events(events, kept, i);
      mem_free(events);
      return status;
    }
  }
  if (kept) memcpy(events, x->events, (size_t)kept * sizeof *events);
  mem_free(x->events);
  x->events = events;
  x->capacity = capacity;
  return ST_OK;
}

st_status comm_exposure_begin(comm_exposure *x) {
  if (x->open) return st_error(ST_ERR_INTERNAL, "comm_exposure_begin twice without an end");
  if (x->used == x->capacity) ST_CHECK(grow(x));
  ST_CHECK(event_record(&x->events[2 * x->used], x->stream));
  x->open = 1;
  return ST_OK;
}

st_status comm_exposure_end(comm_exposure *x) {
  if (!x->open) return st_error(ST_ERR_INTERNAL, "comm_exposure_end without a begin");
  ST_CHECK(event_record(&x->events[2 * x->used + 1], x->stream));
  x->open = 0;
  x->used++;
  return ST_OK;
}

st_status comm_exposure_order_after(comm_exposure *x, comm_work *work) {
  if (comm_size(work->comm) == 1) return comm_order_after(work, x->stream);
  ST_CHECK(comm_exposure_begin(x));
  ST_CHECK(comm_order_after(work, x->stream));
  return comm_exposure_end(x);
}

st_status comm_exposure_collect(comm_exposure *x, double *ms) {
  double sum = 0;
  for (int p = 0; p < x->used; p++) {
    double pair = 0;
    ST_CHECK(event_elapsed_ms(&x->events[2 * p], &x->events[2 * p + 1], &pair));
    sum += pair;
  }
  comm_exposure_discard(x);
  *ms = sum;
  return ST_OK;
}

void comm_exposure_discard(comm_exposure *x) {
  x->used = 0;
  x->open = 0;
}
