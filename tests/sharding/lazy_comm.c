/* lazy_comm.c - collectives in stream order over an inner communicator (lazy_comm.h). */
#include "tests/sharding/lazy_comm.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "tests/core/lazy_device.h"

typedef struct lazy_ctx {
  const st_device *dev;
  comm *inner;
  st_stream stream;    /* for collectives ordered on no stream */
  st_status first_err; /* of the inner collectives run so far, or the misuse below */
  int queued;          /* collectives queued and not run yet, all on one stream: */
  const void *queued_on;
} lazy_ctx;

typedef struct lazy_work {
  st_event done;
} lazy_work;

_Static_assert(sizeof(lazy_work) <= sizeof(((comm_work *)0)->backend_state),
               "lazy_work must fit in comm_work");

/* One queued collective: the inner call's arguments. */
typedef struct call {
  lazy_ctx *ctx;
  comm_op op;
  const void *send;
  void *recv;
  size_t count;
  st_dtype dtype;
  comm_reduce_op reduce;
  int root;
} call;

static void run_call(void *arg) {
  call *c = arg;
  comm *in = c->ctx->inner;
  st_status status = ST_OK;
  switch (c->op) {
    case COMM_ALL_GATHER:
      status = comm_all_gather(in, c->send, c->recv, c->count, c->dtype, NULL);
      break;
    case COMM_REDUCE_SCATTER:
      status = comm_reduce_scatter(in, c->send, c->recv, c->count, c->dtype, c->reduce, NULL);
      break;
    case COMM_ALL_REDUCE:
      status = comm_all_reduce(in, c->send, c->recv, c->count, c->dtype, c->reduce, NULL);
      break;
    case COMM_BROADCAST:
      status = comm_broadcast(in, c->recv, c->count, c->dtype, c->root, NULL);
      break;
    case COMM_BARRIER: status = comm_barrier(in, NULL); break;
    case COMM_OP_COUNT: status = st_error(ST_ERR_INTERNAL, "lazy comm: no such op"); break;
  }
  if (c->ctx->first_err == ST_OK) c->ctx->first_err = status;
  c->ctx->queued--;
  free(c);
}

/* Queues the call on `stream` (the communicator's own when NULL), then its completion event. */
static st_status enqueue(call c, const st_stream *stream, comm_work *work) {
  lazy_ctx *ctx = c.ctx;
  const st_stream *on = stream ? stream : &ctx->stream;
  /* NCCL keeps one communicator's collectives in order only on one stream: with some in flight
   * on another, the ranks may reach them in different orders. */
  if (ctx->queued > 0 && ctx->queued_on != on->handle && ctx->first_err == ST_OK) {
    ctx->first_err = st_error(ST_ERR_INTERNAL,
                              "communicator %s: a collective ordered on a second stream while "
                              "%d are in flight on another",
                              comm_group_name(ctx->inner), ctx->queued);
  }
  call *queued = malloc(sizeof *queued);
  if (!queued) return st_error(ST_ERR_OOM, "lazy comm: out of memory");
  *queued = c;
  st_status status = lazy_stream_host_fn(on, run_call, queued);
  if (status != ST_OK) {
    free(queued);
    return status;
  }
  ctx->queued++;
  ctx->queued_on = on->handle;
  lazy_work *w = (lazy_work *)work->backend_state;
  ST_CHECK(event_create(ctx->dev, &w->done));
  status = event_record(&w->done, on);
  if (status != ST_OK) event_destroy(&w->done);
  return status;
}

static st_status lazy_all_gather(void *ctx, const void *send, void *recv, size_t count,
                                 st_dtype dtype, const st_stream *stream, comm_work *work) {
  return enqueue((call){ctx, COMM_ALL_GATHER, send, recv, count, dtype, COMM_SUM, 0}, stream, work);
}

static st_status lazy_reduce_scatter(void *ctx, const void *send, void *recv, size_t count,
                                     st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                     comm_work *work) {
  return enqueue((call){ctx, COMM_REDUCE_SCATTER, send, recv, count, dtype, op, 0}, stream, work);
}

static st_status lazy_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                 st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                 comm_work *work) {
  return enqueue((call){ctx, COMM_ALL_REDUCE, send, recv, count, dtype, op, 0}, stream, work);
}

static st_status lazy_broadcast(void *ctx, void *buf, size_t count, st_dtype dtype, int root,
                                comm_work *work) {
  return enqueue((call){ctx, COMM_BROADCAST, buf, buf, count, dtype, COMM_SUM, root}, NULL, work);
}

static st_status lazy_barrier(void *ctx, comm_work *work) {
  return enqueue((call){.ctx = ctx, .op = COMM_BARRIER}, NULL, work);
}

/* The host waits: the device runs up to the collective. */
static st_status lazy_test(void *vctx, comm_work *work, int *done) {
  lazy_ctx *ctx = vctx;
  lazy_work *w = (lazy_work *)work->backend_state;
  const st_status status = event_sync(&w->done);
  event_destroy(&w->done);
  *done = 1;
  return status != ST_OK ? status : ctx->first_err;
}

static const st_event *lazy_done_event(void *ctx, comm_work *work) {
  (void)ctx;
  return &((lazy_work *)work->backend_state)->done;
}

static st_status new_ctx(const st_device *dev, comm *inner, void **out) {
  lazy_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    comm_destroy(inner);
    return st_error(ST_ERR_OOM, "lazy comm: out of memory");
  }
  *ctx = (lazy_ctx){.dev = dev, .inner = inner};
  st_status status = stream_create(dev, &ctx->stream);
  if (status != ST_OK) {
    comm_destroy(inner);
    free(ctx);
    return status;
  }
  *out = ctx;
  return ST_OK;
}

static st_status lazy_dup(void *vctx, void **out) {
  lazy_ctx *ctx = vctx;
  comm *inner = NULL;
  ST_CHECK(comm_dup(ctx->inner, "lazy", &inner));
  return new_ctx(ctx->dev, inner, out);
}

static void lazy_abort(void *ctx) { (void)ctx; }

static void lazy_destroy(void *vctx) {
  lazy_ctx *ctx = vctx;
  stream_destroy(&ctx->stream); /* runs what is still queued */
  comm_destroy(ctx->inner);
  free(ctx);
}

static const comm_backend lazy_backend = {
    .name = "lazy",
    .all_gather = lazy_all_gather,
    .reduce_scatter = lazy_reduce_scatter,
    .all_reduce = lazy_all_reduce,
    .broadcast = lazy_broadcast,
    .barrier = lazy_barrier,
    .test = lazy_test,
    .done_event = lazy_done_event,
    .dup = lazy_dup,
    .abort = lazy_abort,
    .destroy = lazy_destroy,
};

st_status lazy_comm_create(comm **out, const st_device *dev, comm *inner) {
  void *ctx = NULL;
  const int rank = comm_rank(inner), size = comm_size(inner);
  char name[32];
  snprintf(name, sizeof name, "%s", comm_group_name(inner));
  ST_CHECK(new_ctx(dev, inner, &ctx));
  return comm_create(out, &lazy_backend, ctx, name, rank, size, 60.0);
}
