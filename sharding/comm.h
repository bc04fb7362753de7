/* comm.h - collectives on one group of ranks, behind one backend interface (MPI or NCCL).
 *
 * The front end (comm.c) owns what every backend shares: the per-communicator sequence
 * number of each collective, the byte counters by op, the timeout, and the report + abort
 * when a collective never finishes. A backend only moves bytes.
 *
 * Buffers live on the communicator's device (device memory on a GPU, host memory on the CPU).
 * Counts are elements; for all-gather and reduce-scatter `count` is the per-rank piece, so the
 * full buffer holds size * count elements. Both work in place as NCCL defines it: all-gather
 * with send = recv + rank * count, reduce-scatter with recv = send + rank * count (the result
 * lands on this rank's own piece of the full buffer). Every collective can be started
 * asynchronously (pass a comm_work) and waited on with comm_wait; passing NULL for the work makes
 * it blocking. Every rank of a group must issue the same collectives in the same order.
 *
 * Stream order (the *_on calls): the collective is ordered after the work already enqueued on
 * `stream` (NCCL enqueues it there; MPI synchronises the stream, then posts the request), and
 * comm_order_after makes a stream's later work see its result: NCCL by a stream wait on its
 * completion event, without the host; MPI by the host completing the request, which is when
 * its "event" completes. The host keeps watch over collectives ordered that way with
 * comm_drain, once per step: the watchdog, with the same timeout and report as comm_wait.
 * Without a stream (NULL, and the calls without _on) a collective is ordered on the
 * communicator's own stream, as a host-synchronous caller expects.
 */
#ifndef ST_SHARDING_COMM_H
#define ST_SHARDING_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/dtype.h"

typedef enum comm_op {
  COMM_ALL_GATHER = 0,
  COMM_REDUCE_SCATTER = 1,
  COMM_ALL_REDUCE = 2,
  COMM_BROADCAST = 3,
  COMM_BARRIER = 4,
  COMM_OP_COUNT = 5
} comm_op;

typedef enum comm_reduce_op { COMM_SUM = 0, COMM_MAX = 1 } comm_reduce_op;

typedef struct comm comm;

/* One collective in flight. Owned by the caller (often on the stack); the backend keeps its
 * request state inside. Must not be moved or reused until comm_wait has returned. */
typedef struct comm_work {
  comm *comm;
  comm_op op;
  uint64_t seq;
  size_t bytes; /* payload: the full buffer's bytes */
  int active;
  _Alignas(16) unsigned char backend_state[96];
} comm_work;

/* Bytes this rank sends per op under ring algorithms, and how many calls were made. */
typedef struct comm_counters {
  uint64_t bytes_sent[COMM_OP_COUNT];
  uint64_t calls[COMM_OP_COUNT];
} comm_counters;

/* The backend's collectives take the stream they are ordered on; NULL means its own. */
typedef struct comm_backend {
  const char *name;
  st_status (*all_gather)(void *ctx, const void *send, void *recv, size_t count, st_dtype dtype,
                          const st_stream *stream, comm_work *work);
  st_status (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t count, st_dtype dtype,
                              comm_reduce_op op, const st_stream *stream, comm_work *work);
  st_status (*all_reduce)(void *ctx, const void *send, void *recv, size_t count, st_dtype dtype,
                          comm_reduce_op op, const st_stream *stream, comm_work *work);
  st_status (*broadcast)(void *ctx, void *buf, size_t count, st_dtype dtype, int root,
                         comm_work *work);
  st_status (*barrier)(void *ctx, comm_work *work);
  /* Polls a started collective; sets *done and finishes it (copies back, frees staging). */
  st_status (*test)(void *ctx, comm_work *work, int *done);
  /* The device event a started collective completes, or NULL where completion is observed by
   * the host (MPI's requests). */
  const st_event *(*done_event)(void *ctx, comm_work *work);
  /* A new context on a duplicate of the same group (its own traffic and ordering). */
  st_status (*dup)(void *ctx, void **out);
  /* Best-effort teardown of in-flight work before the process is aborted. */
  void (*abort)(void *ctx);
  void (*destroy)(void *ctx);
} comm_backend;

/* Wraps a backend context; takes ownership of ctx (destroyed with the comm). */
st_status comm_create(comm **out, const comm_backend *backend, void *ctx, const char *group_name,
                      int rank, int size, double timeout_s);
/* A duplicate of `c` named "<group>.<role>": the same ranks on a communicator of its own, so
 * its collectives neither match nor serialize behind c's; its sequence numbers are its own and
 * its bytes count into c's counters (one group). Collective over the group; c must outlive it. */
st_status comm_dup(comm *c, const char *role, comm **out);
/* Drains what comm_order_after left in flight (comm_drain), then frees; NULL is accepted. */
void comm_destroy(comm *c);

int comm_rank(const comm *c);
int comm_size(const comm *c);
/* The collectives' timeout in seconds (comm_wait's limit, and that of set-up calls on the group).
 */
double comm_timeout_s(const comm *c);
const char *comm_group_name(const comm *c);
const char *comm_backend_name(const comm *c);
const char *comm_op_name(comm_op op);

void comm_counters_get(const comm *c, comm_counters *out);
void comm_counters_reset(comm *c);
/* Sequence number the next collective on this communicator will get (starts at 0). */
uint64_t comm_next_seq(const comm *c);

st_status comm_all_gather(comm *c, const void *send, void *recv, size_t count, st_dtype dtype,
                          comm_work *work);
st_status comm_reduce_scatter(comm *c, const void *send, void *recv, size_t count, st_dtype dtype,
                              comm_reduce_op op, comm_work *work);
st_status comm_all_reduce(comm *c, const void *send, void *recv, size_t count, st_dtype dtype,
                          comm_reduce_op op, comm_work *work);
st_status comm_broadcast(comm *c, void *buf, size_t count, st_dtype dtype, int root,
                         comm_work *work);
st_status comm_barrier(comm *c, comm_work *work);

/* The same collectives ordered on `stream` (see the top of this file); with a NULL work the host
 * waits for the collective, as with the calls above. */
st_status comm_all_gather_on(comm *c, const st_stream *stream, const void *send, void *recv,
                             size_t count, st_dtype dtype, comm_work *work);
st_status comm_reduce_scatter_on(comm *c, const st_stream *stream, const void *send, void *recv,
                                 size_t count, st_dtype dtype, comm_reduce_op op, comm_work *work);
st_status comm_all_reduce_on(comm *c, const st_stream *stream, const void *send, void *recv,
                             size_t count, st_dtype dtype, comm_reduce_op op, comm_work *work);

/* Makes the later work of `stream` see the result of a started collective (top of this file).
 * The work record is free afterwards; the communicator keeps watch over the collective until
 * comm_drain. */
st_status comm_order_after(comm_work *work, const st_stream *stream);

/* The watchdog: waits on the host for every collective comm_order_after left in flight,
 * reporting and aborting as comm_wait does past the timeout. */
st_status comm_drain(comm *c);

/* Waits for a started collective. If it does not finish within the communicator's timeout,
 * logs group, op, sequence number and bytes, and aborts every rank of the job. */
st_status comm_wait(comm_work *work);

/* Bytes one rank sends for `op` on `size` ranks moving a `bytes`-byte buffer, under ring
 * algorithms: (n-1)/n bytes for all-gather, reduce-scatter and broadcast, 2(n-1)/n for
 * all-reduce, 0 for a barrier (rounded down). */
uint64_t comm_ring_bytes(comm_op op, int size, size_t bytes);

#endif /* ST_SHARDING_COMM_H */
