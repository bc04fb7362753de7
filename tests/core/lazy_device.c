/* lazy_device.c - the CPU with CUDA's stream semantics (lazy_device.h): streams hold queues of
 * copies, fills, waits and timing marks, run in order when something forces them. */
#include "tests/core/lazy_device.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"

typedef enum op_kind { OP_COPY, OP_FILL, OP_WAIT, OP_MARK, OP_HOST_FN } op_kind;

struct lazy_stream;
struct lazy_event;

/* One queued operation. A copy from pageable memory reads `owned` (its source as it was when
 * queued); a wait runs `on` up to `upto`; a mark notes when the stream reached `event`; a host
 * function is fn(arg). */
typedef struct lazy_op {
  op_kind kind;
  void *dst;
  const void *src;
  void *owned;
  size_t bytes;
  int value;
  struct lazy_stream *on;
  uint64_t upto;
  struct lazy_event *event;
  void (*fn)(void *arg);
  void *arg;
  long queued_at; /* the device call that queued it */
} lazy_op;

/* Operations are numbered from 0 for the stream's life; ops[i] is number base + i, and
 * `done` counts the ones that ran. */
typedef struct lazy_stream {
  lazy_op *ops;
  size_t cap;
  uint64_t base, count, done;
  struct lazy_stream *next;
} lazy_stream;

/* Recorded at operation `seq` of `stream` (NULL: never recorded, or its stream is gone and
 * ran everything). */
typedef struct lazy_event {
  lazy_stream *stream;
  uint64_t seq;
  int timed, reached;
  double reached_ms;
  struct lazy_event *next;
} lazy_event;

/* A MEM_PINNED or MEM_DEVICE allocation: memory a copy does not read when it is queued. */
typedef struct lazy_block {
  const char *begin;
  size_t bytes;
} lazy_block;

static lazy_policy policy;
static uint64_t rng_state;
static lazy_counts counts;
static long calls;
static lazy_stream *streams;
static lazy_event *events;
static lazy_block *blocks;
static size_t n_blocks, blocks_cap;

static uint64_t next_random(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return rng_state >> 33;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Runs `s` until `upto` operations have run. A wait runs the stream it waits on first; that
 * stream can only wait, in turn, on operations of `s` already run (a wait names a record made
 * before it was queued), so the recursion ends. */
static void run_until(lazy_stream *s, uint64_t upto) {
  while (s->done < upto) {
    lazy_op *op = &s->ops[s->done - s->base];
    switch (op->kind) {
      case OP_COPY: memmove(op->dst, op->owned ? op->owned : op->src, op->bytes); break;
      case OP_FILL: memset(op->dst, op->value, op->bytes); break;
      case OP_WAIT:
        if (op->on) run_until(op->on, op->upto);
        break;
      case OP_MARK:
        if (op->event) op->event->reached = 1, op->event->reached_ms = now_ms();
        break;
      case OP_HOST_FN: op->fn(op->arg); break;
    }
    if ((op->kind == OP_COPY || op->kind == OP_FILL) && op->queued_at < calls) counts.ran_late++;
    free(op->owned);
    op->owned = NULL;
    s->done++;
  }
  if (s->done == s->count) s->base = s->count; /* empty: the storage starts over */
}

static void run_all(void) {
  for (lazy_stream *s = streams; s; s = s->next) run_until(s, s->count);
}

/* Every entry into the device counts as a call; under LAZY_RANDOM a random stream may run
 * part of its queue here, as a GPU runs work whenever it likes once it is ready. */
static void enter(void) {
  calls++;
  if (policy != LAZY_RANDOM || next_random() % 4 != 0) return;
  int n = 0;
  for (lazy_stream *s = streams; s; s = s->next) n++;
  if (n == 0) return;
  lazy_stream *s = streams;
  for (int pick = (int)(next_random() % (uint64_t)n); pick > 0; pick--) s = s->next;
  uint64_t plain = 0; /* copies, fills and marks before the first wait or host function */
  while (s->done + plain < s->count) {
    const op_kind kind = s->ops[s->done + plain - s->base].kind;
    if (kind == OP_WAIT || kind == OP_HOST_FN) break;
    plain++;
  }
  if (plain) run_until(s, s->done + 1 + next_random() % plain);
}

static st_status push(lazy_stream *s, lazy_op op) {
  if (s->count - s->base == s->cap) {
    const size_t cap = s->cap ? 2 * s->cap : 64;
    lazy_op *grown = realloc(s->ops, cap * sizeof *grown);
    if (!grown) return st_error(ST_ERR_OOM, "lazy device: out of memory queueing");
    s->ops = grown;
    s->cap = cap;
  }
  op.queued_at = calls;
  s->ops[s->count++ - s->base] = op;
  return ST_OK;
}

static int is_pageable(const void *p) {
  for (size_t i = 0; i < n_blocks; i++) {
    if ((const char *)p >= blocks[i].begin && (const char *)p < blocks[i].begin + blocks[i].bytes)
      return 0;
  }
  return 1;
}

static st_status lazy_raw_alloc(mem_kind kind, size_t bytes, void **out) {
  enter();
  ST_CHECK(device_backend_cpu.raw_alloc(kind, bytes, out));
  if (kind == MEM_HOST) return ST_OK;
  if (n_blocks == blocks_cap) {
    const size_t cap = blocks_cap ? 2 * blocks_cap : 256;
    lazy_block *grown = realloc(blocks, cap * sizeof *grown);
    if (!grown) {
      device_backend_cpu.raw_free(kind, *out);
      return st_error(ST_ERR_OOM, "lazy device: out of memory listing allocations");
    }
    blocks = grown;
    blocks_cap = cap;
  }
  blocks[n_blocks++] = (lazy_block){*out, bytes};
  return ST_OK;
}

/* cudaFree and cudaFreeHost wait for the whole device first. */
static void lazy_raw_free(mem_kind kind, void *ptr) {
  enter();
  run_all();
  for (size_t i = 0; i < n_blocks; i++) {
    if (blocks[i].begin == ptr) {
      blocks[i] = blocks[--n_blocks];
      break;
    }
  }
  device_backend_cpu.raw_free(kind, ptr);
}

static st_status lazy_stream_create(void **out) {
  enter();
  lazy_stream *s = calloc(1, sizeof *s);
  if (!s) return st_error(ST_ERR_OOM, "lazy device: out of memory creating a stream");
  s->next = streams;
  streams = s;
  *out = s;
  return ST_OK;
}

/* The stream's work completes (as CUDA lets it after cudaStreamDestroy); waits and events that
 * name it are then satisfied and forget it. */
static void lazy_stream_destroy(void *stream) {
  enter();
  lazy_stream *s = stream;
  run_until(s, s->count);
  for (lazy_stream **at = &streams; *at; at = &(*at)->next) {
    if (*at == s) {
      *at = s->next;
      break;
    }
  }
  for (lazy_stream *t = streams; t; t = t->next) {
    for (uint64_t i = t->done; i < t->count; i++) {
      if (t->ops[i - t->base].on == s) t->ops[i - t->base].on = NULL;
    }
  }
  for (lazy_event *e = events; e; e = e->next) {
    if (e->stream == s) e->stream = NULL;
  }
  free(s->ops);
  free(s);
}

static st_status lazy_stream_sync(void *stream) {
  enter();
  lazy_stream *s = stream;
  run_until(s, s->count);
  return ST_OK;
}

static st_status lazy_memcpy(void *dst, const void *src, size_t bytes, void *stream) {
  enter();
  lazy_stream *s = stream;
  if (bytes == 0) return ST_OK;
  if (is_pageable(dst)) { /* synchronous, after the stream's work */
    run_until(s, s->count);
    memmove(dst, src, bytes);
    return ST_OK;
  }
  lazy_op op = {.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes};
  if (is_pageable(src)) {
    op.owned = malloc(bytes);
    if (!op.owned) return st_error(ST_ERR_OOM, "lazy device: out of memory staging a copy");
    memcpy(op.owned, src, bytes);
  }
  st_status status = push(s, op);
  if (status != ST_OK) free(op.owned);
  if (status == ST_OK) counts.queued++;
  return status;
}

static st_status lazy_memset(void *dst, int value, size_t bytes, void *stream) {
  enter();
  if (bytes == 0) return ST_OK;
  if (is_pageable(dst)) {
    return st_error(ST_ERR_INVALID_ARG, "lazy device: a stream fill of pageable host memory");
  }
  ST_CHECK(push(stream, (lazy_op){.kind = OP_FILL, .dst = dst, .bytes = bytes, .value = value}));
  counts.queued++;
  return ST_OK;
}

st_status lazy_stream_host_fn(const st_stream *stream, void (*fn)(void *arg), void *arg) {
  enter();
  return push(stream->handle, (lazy_op){.kind = OP_HOST_FN, .fn = fn, .arg = arg});
}

static st_status make_event(void **out, int timed) {
  enter();
  lazy_event *e = calloc(1, sizeof *e);
  if (!e) return st_error(ST_ERR_OOM, "lazy device: out of memory creating an event");
  e->timed = timed;
  e->next = events;
  events = e;
  *out = e;
  return ST_OK;
}

static st_status lazy_event_create(void **out) { return make_event(out, 0); }
static st_status lazy_timed_event_create(void **out) { return make_event(out, 1); }

static void lazy_event_destroy(void *event) {
  enter();
  for (lazy_event **at = &events; *at; at = &(*at)->next) {
    if (*at == event) {
      *at = (*at)->next;
      break;
    }
  }
  for (lazy_stream *t = streams; t; t = t->next) {
    for (uint64_t i = t->done; i < t->count; i++) {
      if (t->ops[i - t->base].event == event) t->ops[i - t->base].event = NULL;
    }
  }
  free(event);
}

static st_status lazy_event_record(void *event, void *stream) {
  enter();
  lazy_event *e = event;
  lazy_stream *s = stream;
  e->reached = 0;
  if (e->timed) ST_CHECK(push(s, (lazy_op){.kind = OP_MARK, .event = e}));
  e->stream = s;
  e->seq = s->count;
  return ST_OK;
}

static st_status lazy_stream_wait_event(void *stream, void *event) {
  enter();
  const lazy_event *e = event;
  if (!e->stream) return ST_OK; /* never recorded, or complete: nothing to wait for */
  return push(stream, (lazy_op){.kind = OP_WAIT, .on = e->stream, .upto = e->seq});
}

static st_status lazy_event_query(void *event, int *done) {
  enter();
  const lazy_event *e = event;
  *done = !e->stream || e->stream->done >= e->seq;
  return ST_OK;
}

static st_status lazy_event_sync(void *event) {
  enter();
  lazy_event *e = event;
  if (e->stream) run_until(e->stream, e->seq);
  return ST_OK;
}

static st_status lazy_event_elapsed_ms(void *start, void *end, double *ms) {
  enter();
  const lazy_event *a = start, *b = end;
  if (!a->timed || !b->timed || !a->reached || !b->reached) {
    return st_error(ST_ERR_INVALID_ARG, "lazy device: an event timed before it completed");
  }
  *ms = b->reached_ms - a->reached_ms;
  return ST_OK;
}

st_device lazy_device(lazy_policy p, uint64_t seed) {
  static device_backend backend;
  backend = device_backend_cpu;
  backend.name = "lazy";
  backend.raw_alloc = lazy_raw_alloc;
  backend.raw_free = lazy_raw_free;
  backend.stream_create = lazy_stream_create;
  backend.stream_destroy = lazy_stream_destroy;
  backend.stream_sync = lazy_stream_sync;
  backend.memcpy_async = lazy_memcpy;
  backend.memset_async = lazy_memset;
  backend.event_create = lazy_event_create;
  backend.event_destroy = lazy_event_destroy;
  backend.event_record = lazy_event_record;
  backend.stream_wait_event = lazy_stream_wait_event;
  backend.event_query = lazy_event_query;
  backend.event_sync = lazy_event_sync;
  backend.timed_event_create = lazy_timed_event_create;
  backend.event_elapsed_ms = lazy_event_elapsed_ms;
  backend.device_memory_is_host = 0;
  policy = p;
  rng_state = seed * 2 + 1;
  counts = (lazy_counts){0};
  return (st_device){.backend = &backend, .ordinal = 0};
}

lazy_counts lazy_device_counts(void) { return counts; }
