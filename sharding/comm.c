/* comm.c - the collective front end: argument checks, sequence numbers, byte counters, and
 * waiting with a timeout. On a timeout it aborts the whole MPI job: the peers of a rank that
 * never arrives are blocked inside the collective and cannot be released any other way, so
 * this is the one place where the library ends the process instead of returning an error. */
#include "sharding/comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

/* Exit code of every rank when a collective times out. */
#define COMM_TIMEOUT_EXIT_CODE 3

/* Collectives ordered by comm_order_after that the host still watches (a ring allocated at the
 * first one: backends that complete on the host never need it); when the ring is full the
 * oldest, long finished on any real schedule, is waited for first. */
#define COMM_WATCH_MAX 64

struct comm {
  const comm_backend *backend;
  void *ctx;
  char group_name[32];
  int rank;
  int size;
  double timeout_s;
  uint64_t next_seq;
  comm_counters own_counters;
  comm_counters *counters; /* own_counters, or those of the comm this one duplicates */
  comm_work *watched;      /* COMM_WATCH_MAX entries, or NULL */
  int watch_first, watch_count;
};

st_status comm_create(comm **out, const comm_backend *backend, void *ctx, const char *group_name,
                      int rank, int size, double timeout_s) {
  *out = NULL;
  comm *c = NULL;
  st_status status = mem_alloc_zeroed((void **)&c, sizeof *c, MEM_HOST, MEM_WORKSPACE, NULL);
  if (status != ST_OK) {
    backend->destroy(ctx);
    return status;
  }
  c->backend = backend;
  c->ctx = ctx;
  snprintf(c->group_name, sizeof c->group_name, "%s", group_name);
  c->rank = rank;
  c->size = size;
  c->timeout_s = timeout_s;
  c->counters = &c->own_counters;
  *out = c;
  return ST_OK;
}

st_status comm_dup(comm *c, const char *role, comm **out) {
  *out = NULL;
  char name[sizeof c->group_name];
  if (snprintf(name, sizeof name, "%s.%s", c->group_name, role) >= (int)sizeof name) {
    return st_error(ST_ERR_INVALID_ARG, "group name %s.%s is longer than %zu characters",
                    c->group_name, role, sizeof name - 1);
  }
  void *ctx = NULL;
  ST_CHECK(c->backend->dup(c->ctx, &ctx));
  ST_CHECK(comm_create(out, c->backend, ctx, name, c->rank, c->size, c->timeout_s));
  (*out)->counters = c->counters;
  return ST_OK;
}

void comm_destroy(comm *c) {
  if (!c) return;
  (void)comm_drain(c); /* a collective still in flight would write into freed memory */
  c->backend->destroy(c->ctx);
  mem_free(c->watched);
  mem_free(c);
}

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->size; }
double comm_timeout_s(const comm *c) { return c->timeout_s; }
const char *comm_group_name(const comm *c) { return c->group_name; }
const char *comm_backend_name(const comm *c) { return c->backend->name; }

const char *comm_op_name(comm_op op) {
  static const char *const names[COMM_OP_COUNT] = {"all_gather", "reduce_scatter", "all_reduce",
                                                   "broadcast", "barrier"};
  return (unsigned)op < COMM_OP_COUNT ? names[op] : "invalid";
}

void comm_counters_get(const comm *c, comm_counters *out) { *out = *c->counters; }
void comm_counters_reset(comm *c) { memset(c->counters, 0, sizeof *c->counters); }
uint64_t comm_next_seq(const comm *c) { return c->next_seq; }

uint64_t comm_ring_bytes(comm_op op, int size, size_t bytes) {
  uint64_t n = (uint64_t)size;
  switch (op) {
    case COMM_ALL_GATHER:
    case COMM_REDUCE_SCATTER:
    case COMM_BROADCAST: return (uint64_t)bytes * (n - 1) / n;
    case COMM_ALL_REDUCE: return 2 * (uint64_t)bytes * (n - 1) / n;
    default: return 0;
  }
}

/* Fills the work record and the counters; called before the backend starts the op. */
static void begin(comm *c, comm_work *work, comm_op op, size_t bytes) {
  memset(work, 0, sizeof *work);
  work->comm = c;
  work->op = op;
  work->seq = c->next_seq++;
  work->bytes = bytes;
  work->active = 1;
  c->counters->calls[op]++;
  c->counters->bytes_sent[op] += comm_ring_bytes(op, c->size, bytes);
  if (st_log_enabled(ST_LOG_DEBUG)) {
    st_log(ST_LOG_DEBUG, "comm %s: %s seq %llu, %zu bytes", c->group_name, comm_op_name(op),
           (unsigned long long)work->seq, bytes);
  }
}

/* Completes a start: waits at once when the caller passed no work record. */
static st_status finish_start(st_status started, comm_work *work, int blocking) {
  if (started != ST_OK) {
    work->active = 0;
    return started;
  }
  return blocking ? comm_wait(work) : ST_OK;
}

static st_status check_dtype(const comm *c, st_dtype dtype, comm_op op) {
  if ((unsigned)dtype >= ST_DTYPE_COUNT) {
    return st_error(ST_ERR_INVALID_ARG, "%s on group %s: dtype %d is not a dtype", comm_op_name(op),
                    c->group_name, (int)dtype);
  }
  return ST_OK;
}

st_status comm_all_gather_on(comm *c, const st_stream *stream, const void *send, void *recv,
                             size_t count, st_dtype dtype, comm_work *work) {
  ST_CHECK(check_dtype(c, dtype, COMM_ALL_GATHER));
  comm_work local;
  comm_work *w = work ? work : &local;
  begin(c, w, COMM_ALL_GATHER, count * (size_t)c->size * dtype_size(dtype));
  return finish_start(c->backend->all_gather(c->ctx, send, recv, count, dtype, stream, w), w,
                      !work);
}

st_status comm_reduce_scatter_on(comm *c, const st_stream *stream, const void *send, void *recv,
                                 size_t count, st_dtype dtype, comm_reduce_op op, comm_work *work) {
  ST_CHECK(check_dtype(c, dtype, COMM_REDUCE_SCATTER));
  comm_work local;
  comm_work *w = work ? work : &local;
  begin(c, w, COMM_REDUCE_SCATTER, count * (size_t)c->size * dtype_size(dtype));
  return finish_start(c->backend->reduce_scatter(c->ctx, send, recv, count, dtype, op, stream, w),
                      w, !work);
}

st_status comm_all_reduce_on(comm *c, const st_stream *stream, const void *send, void *recv,
                             size_t count, st_dtype dtype, comm_reduce_op op, comm_work *work) {
  ST_CHECK(check_dtype(c, dtype, COMM_ALL_REDUCE));
  comm_work local;
  comm_work *w = work ? work : &local;
  begin(c, w, COMM_ALL_REDUCE, count * dtype_size(dtype));
  return finish_start(c->backend->all_reduce(c->ctx, send, recv, count, dtype, op, stream, w), w,
                      !work);
}

st_status comm_all_gather(comm *c, const void *send, void *recv, size_t count, st_dtype dtype,
                          comm_work *work) {
  return comm_all_gather_on(c, NULL, send, recv, count, dtype, work);
}

st_status comm_reduce_scatter(comm *c, const void *send, void *recv, size_t count, st_dtype dtype,
                              comm_reduce_op op, comm_work *work) {
  return comm_reduce_scatter_on(c, NULL, send, recv, count, dtype, op, work);
}

st_status comm_all_reduce(comm *c, const void *send, void *recv, size_t count, st_dtype dtype,
                          comm_reduce_op op, comm_work *work) {
  return comm_all_reduce_on(c, NULL, send, recv, count, dtype, op, work);
}

st_status comm_broadcast(comm *c, void *buf, size_t count, st_dtype dtype, int root,
                         comm_work *work) {
  ST_CHECK(check_dtype(c, dtype, COMM_BROADCAST));
  if (root < 0 || root >= c->size) {
    return st_error(ST_ERR_INVALID_ARG, "broadcast on group %s: root %d outside 0..%d",
                    c->group_name, root, c->size - 1);
  }
  comm_work local;
  comm_work *w = work ? work : &local;
  begin(c, w, COMM_BROADCAST, count * dtype_size(dtype));
  return finish_start(c->backend->broadcast(c->ctx, buf, count, dtype, root, w), w, !work);
}

st_status comm_barrier(comm *c, comm_work *work) {
  comm_work local;
  comm_work *w = work ? work : &local;
  begin(c, w, COMM_BARRIER, 0);
  return finish_start(c->backend->barrier(c->ctx, w), w, !work);
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void report_timeout_and_abort(const comm_work *work, double waited) {
  const comm *c = work->comm;
  st_log(ST_LOG_ERROR,
         "collective timed out after %.1f s: group %s (rank %d of %d, %s), op %s, seq %llu, "
         "%zu bytes; a peer never reached it. Aborting all ranks.",
         waited, c->group_name, c->rank, c->size, c->backend->name, comm_op_name(work->op),
         (unsigned long long)work->seq, work->bytes);
  c->backend->abort(c->ctx);
  MPI_Abort(MPI_COMM_WORLD, COMM_TIMEOUT_EXIT_CODE);
  exit(COMM_TIMEOUT_EXIT_CODE); /* MPI_Abort does not return; this keeps that a certainty */
}

st_status comm_wait(comm_work *work) {
  if (!work->active) {
    return st_error(ST_ERR_INVALID_ARG, "comm_wait on a collective that is not in flight");
  }
  comm *c = work->comm;
  double start = now_seconds();
  /* Spin briefly (progress needs frequent polls on MPI), then back off to 50 us sleeps so a
   * long wait does not burn the core a peer rank may need. */
  for (long polls = 0;; polls++) {
    int done = 0;
    st_status status = c->backend->test(c->ctx, work, &done);
    if (status != ST_OK || done) {
      work->active = 0;
      return status;
    }
    if (polls > 2000) {
      struct timespec pause = {0, 50000};
      nanosleep(&pause, NULL);
    }
    if ((polls & 63) == 0) {
      double waited = now_seconds() - start;
      if (waited > c->timeout_s) report_timeout_and_abort(work, waited);
    }
  }
}

st_status comm_order_after(comm_work *work, const st_stream *stream) {
  if (!work->active) {
    return st_error(ST_ERR_INVALID_ARG, "comm_order_after on a collective that is not in flight");
  }
  comm *c = work->comm;
  const st_event *done = c->backend->done_event(c->ctx, work);
  if (!done) return comm_wait(work); /* completion is the host's to observe */
  ST_CHECK(stream_wait_event(stream, done));
  if (!c->watched) {
    ST_CHECK(mem_alloc((void **)&c->watched, COMM_WATCH_MAX * sizeof *c->watched, MEM_HOST,
                       MEM_WORKSPACE, NULL));
  }
  if (c->watch_count == COMM_WATCH_MAX) {
    ST_CHECK(comm_wait(&c->watched[c->watch_first]));
    c->watch_first = (c->watch_first + 1) % COMM_WATCH_MAX;
    c->watch_count--;
  }
  c->watched[(c->watch_first + c->watch_count) % COMM_WATCH_MAX] = *work;
  c->watch_count++;
  work->active = 0;
  return ST_OK;
}

st_status comm_drain(comm *c) {
  st_status first = ST_OK;
  for (; c->watch_count > 0; c->watch_count--) {
    st_status status = comm_wait(&c->watched[c->watch_first]);
    if (first == ST_OK) first = status;
    c->watch_first = (c->watch_first + 1) % COMM_WATCH_MAX;
  }
  return first;
}
