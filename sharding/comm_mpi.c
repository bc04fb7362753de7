/* comm_mpi.c - MPI backend of comm.h. Each communicator owns a duplicate of its MPI
 * communicator (so its traffic cannot match anyone else's), its half-precision reduction ops,
 * and, on a CUDA device, a stream for staging copies. A collective ordered on a stream first
 * synchronises that stream (MPI reads the buffers from the host's side); its completion is the
 * request's, observed by the host, so it has no device event. */
#include "sharding/comm_mpi.h"

#include <limits.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check_mpi.h"
#include "core/error.h"

typedef struct mpi_ctx {
  MPI_Comm comm;
  int rank, size;
  st_device dev;
  int staged; /* buffers are device memory: go through pinned host staging */
  st_stream stream;
  MPI_Op half_ops[ST_DTYPE_COUNT][2]; /* [bf16|fp16][sum|max]; MPI_OP_NULL for fp32 */
} mpi_ctx;

/* Per-collective state, kept inside comm_work.backend_state. */
typedef struct mpi_work {
  MPI_Request request;
  void *staging;     /* pinned host copy of the buffer, or NULL */
  void *device_dst;  /* where the staged result goes back to */
  void *inplace_src; /* in-place reduce-scatter: MPI leaves the result at the buffer's start */
  void *inplace_dst; /* ... and it belongs at this rank's piece */
  size_t result_bytes;
} mpi_work;

_Static_assert(sizeof(mpi_work) <= sizeof(((comm_work *)0)->backend_state),
               "mpi_work must fit in comm_work");

static mpi_work *state_of(comm_work *work) { return (mpi_work *)work->backend_state; }

/* ---- half-precision reductions ---------------------------------------------------------- */

/* inout[i] = op(in[i], inout[i]) on 16-bit floats, each pair computed in fp32 and rounded. */
static void half_reduce(const uint16_t *in, uint16_t *inout, int len, float (*to_f32)(uint16_t),
                        uint16_t (*from_f32)(float), int take_max) {
  for (int i = 0; i < len; i++) {
    float a = to_f32(in[i]), b = to_f32(inout[i]);
    if (take_max) {
      if (a > b) inout[i] = in[i];
    } else {
      inout[i] = from_f32(a + b);
    }
  }
}

/* The four MPI user functions: bf16 and fp16, sum and max. MPI calls them through a fixed
 * signature with no room for a closure, hence one function per format and op, written once here. */
#define HALF_REDUCTION(name, to_f32, from_f32, take_max)                  \
  static void name(void *in, void *inout, int *len, MPI_Datatype *type) { \
    (void)type;                                                           \
    half_reduce(in, inout, *len, to_f32, from_f32, take_max);             \
  }

HALF_REDUCTION(bf16_sum, f32_from_bf16, bf16_from_f32, 0)
HALF_REDUCTION(bf16_max, f32_from_bf16, bf16_from_f32, 1)
HALF_REDUCTION(fp16_sum, f32_from_fp16, fp16_from_f32, 0)
HALF_REDUCTION(fp16_max, f32_from_fp16, fp16_from_f32, 1)
#undef HALF_REDUCTION

static MPI_Datatype mpi_type(st_dtype dtype) { return dtype == ST_FP32 ? MPI_FLOAT : MPI_UINT16_T; }

static MPI_Op mpi_reduce_op(const mpi_ctx *ctx, st_dtype dtype, comm_reduce_op op) {
  if (dtype == ST_FP32) return op == COMM_SUM ? MPI_SUM : MPI_MAX;
  return ctx->half_ops[dtype][op];
}

static st_status check_count(size_t count) {
  if (count > INT_MAX) {
    return st_error(ST_ERR_UNSUPPORTED, "MPI collective of %zu elements exceeds MPI's int count",
                    count);
  }
  return ST_OK;
}

/* ---- staging --------------------------------------------------------------------------- */

static void release_staging(mpi_work *w) {
  mem_free(w->staging);
  w->staging = NULL;
}

/* The buffers an MPI collective reads (`in`, MPI_IN_PLACE when it works in place) and
 * writes (`out`). */
typedef struct mpi_io {
  const void *in;
  void *out;
} mpi_io;

/* With staging: a pinned host buffer of `bytes` holding a copy of src's first `copy_bytes`
 * bytes at `copy_offset`, on which MPI works in place (`io`); the first `result_bytes` of the
 * collective's result are copied back to dst when it completes (mpi_test). */
static st_status stage(mpi_ctx *ctx, mpi_work *w, const void *src, size_t copy_offset,
                       size_t copy_bytes, size_t bytes, void *dst, size_t result_bytes,
                       mpi_io *io) {
  ST_CHECK(mem_alloc(&w->staging, bytes, MEM_PINNED, MEM_COMM, &ctx->dev));
  if (copy_bytes) {
    st_status status =
        stream_memcpy(&ctx->stream, (char *)w->staging + copy_offset, src, copy_bytes);
    if (status == ST_OK) status = stream_sync(&ctx->stream);
    if (status != ST_OK) {
      release_staging(w);
      return status;
    }
  }
  w->device_dst = dst;
  w->result_bytes = result_bytes;
  *io = (mpi_io){MPI_IN_PLACE, w->staging};
  return ST_OK;
}

/* The result of starting an MPI collective: on failure the staging buffer is released (no
 * test will ever run for this work) and MPI's error becomes an st_status. */
static st_status started(mpi_work *w, int rc, const char *what) {
  if (rc == MPI_SUCCESS) return ST_OK;
  release_staging(w);
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return st_error(ST_ERR_MPI, "%s failed: %s", what, text);
}

/* ---- collectives ----------------------------------------------------------------------- */

/* Before a collective over `elements` starts: the work enqueued on `stream` produces the
 * buffers, so it must be done before MPI reads them, and MPI counts in int. */
static st_status begin(const st_stream *stream, size_t elements) {
  if (stream) ST_CHECK(stream_sync(stream));
  return check_count(elements);
}

static st_status mpi_all_gather(void *vctx, const void *send, void *recv, size_t count,
                                st_dtype dtype, const st_stream *stream, comm_work *work) {
  mpi_ctx *ctx = vctx;
  mpi_work *w = state_of(work);
  ST_CHECK(begin(stream, count * (size_t)ctx->size));
  size_t piece = count * dtype_size(dtype);
  mpi_io io = {send, recv};
  if (ctx->staged) {
    size_t total = piece * (size_t)ctx->size;
    ST_CHECK(stage(ctx, w, send, piece * (size_t)ctx->rank, piece, total, recv, total, &io));
  } else if (send == (const char *)recv + piece * (size_t)ctx->rank) {
    io.in = MPI_IN_PLACE;
  }
  return started(w,
                 MPI_Iallgather(io.in, (int)count, mpi_type(dtype), io.out, (int)count,
                                mpi_type(dtype), ctx->comm, &w->request),
                 "MPI_Iallgather");
}

static st_status mpi_reduce_scatter(void *vctx, const void *send, void *recv, size_t count,
                                    st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                    comm_work *work) {
  mpi_ctx *ctx = vctx;
  mpi_work *w = state_of(work);
  ST_CHECK(begin(stream, count * (size_t)ctx->size));
  size_t piece = count * dtype_size(dtype);
  mpi_io io = {send, recv};
  if (ctx->staged) {
    size_t total = piece * (size_t)ctx->size;
    /* One buffer: the full input, and the result written over its start. */
    ST_CHECK(stage(ctx, w, send, 0, total, total, recv, piece, &io));
  } else if (recv == (const char *)send + piece * (size_t)ctx->rank) {
    /* In place, as NCCL defines it: the result lands on this rank's own piece of the input.
     * MPI writes it to the buffer's start; mpi_test moves it. */
    io = (mpi_io){MPI_IN_PLACE, (void *)send};
    w->inplace_src = io.out;
    w->inplace_dst = recv;
    w->result_bytes = piece;
  }
  return started(w,
                 MPI_Ireduce_scatter_block(io.in, io.out, (int)count, mpi_type(dtype),
                                           mpi_reduce_op(ctx, dtype, op), ctx->comm, &w->request),
                 "MPI_Ireduce_scatter_block");
}

static st_status mpi_all_reduce(void *vctx, const void *send, void *recv, size_t count,
                                st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                comm_work *work) {
  mpi_ctx *ctx = vctx;
  mpi_work *w = state_of(work);
  ST_CHECK(begin(stream, count));
  size_t bytes = count * dtype_size(dtype);
  mpi_io io = {send == recv ? MPI_IN_PLACE : send, recv};
  if (ctx->staged) ST_CHECK(stage(ctx, w, send, 0, bytes, bytes, recv, bytes, &io));
  return started(w,
                 MPI_Iallreduce(io.in, io.out, (int)count, mpi_type(dtype),
                                mpi_reduce_op(ctx, dtype, op), ctx->comm, &w->request),
                 "MPI_Iallreduce");
}

static st_status mpi_broadcast(void *vctx, void *buf, size_t count, st_dtype dtype, int root,
                               comm_work *work) {
  mpi_ctx *ctx = vctx;
  mpi_work *w = state_of(work);
  ST_CHECK(check_count(count));
  size_t bytes = count * dtype_size(dtype);
  mpi_io io = {buf, buf}; /* a broadcast has one buffer, MPI's out */
  if (ctx->staged) ST_CHECK(stage(ctx, w, buf, 0, bytes, bytes, buf, bytes, &io));
  return started(w, MPI_Ibcast(io.out, (int)count, mpi_type(dtype), root, ctx->comm, &w->request),
                 "MPI_Ibcast");
}

static st_status mpi_barrier(void *vctx, comm_work *work) {
  mpi_ctx *ctx = vctx;
  MPI_CHECK(MPI_Ibarrier(ctx->comm, &state_of(work)->request));
  return ST_OK;
}

static st_status mpi_test(void *vctx, comm_work *work, int *done) {
  mpi_ctx *ctx = vctx;
  mpi_work *w = state_of(work);
  MPI_CHECK(MPI_Test(&w->request, done, MPI_STATUS_IGNORE));
  if (*done && w->inplace_dst) memmove(w->inplace_dst, w->inplace_src, w->result_bytes);
  if (!*done || !w->staging) return ST_OK;
  st_status status = stream_memcpy(&ctx->stream, w->device_dst, w->staging, w->result_bytes);
  if (status == ST_OK) status = stream_sync(&ctx->stream);
  release_staging(w);
  return status;
}

/* A request completes on the host: there is no device event to wait on. */
static const st_event *mpi_done_event(void *vctx, comm_work *work) {
  (void)vctx;
  (void)work;
  return NULL;
}

static void mpi_abort(void *vctx) { (void)vctx; /* MPI_Abort tears everything down */ }

static st_status mpi_dup(void *vctx, void **out);

int comm_mpi_finalized(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized;
}

static void mpi_destroy(void *vctx) {
  mpi_ctx *ctx = vctx;
  if (!ctx) return;
  /* After MPI_Finalize, freeing an op or a communicator is an error (Open MPI aborts). */
  const int mpi_usable = !comm_mpi_finalized();
  for (int d = 0; mpi_usable && d < ST_DTYPE_COUNT; d++) {
    for (int op = 0; op < 2; op++) {
      if (ctx->half_ops[d][op] != MPI_OP_NULL) MPI_Op_free(&ctx->half_ops[d][op]);
    }
  }
  if (mpi_usable && ctx->comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->comm);
  stream_destroy(&ctx->stream);
  mem_free(ctx);
}

static const comm_backend mpi_backend = {
    .name = "mpi",
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .done_event = mpi_done_event,
    .dup = mpi_dup,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

static st_status create_ctx(mpi_ctx *ctx, MPI_Comm mpi_comm, const st_device *dev) {
  ctx->dev = *dev;
  ctx->staged = dev->backend->kind != ST_DEVICE_CPU;
  ST_CHECK(stream_create(dev, &ctx->stream));
  MPI_CHECK(MPI_Comm_dup(mpi_comm, &ctx->comm));
  MPI_CHECK(MPI_Comm_rank(ctx->comm, &ctx->rank));
  MPI_CHECK(MPI_Comm_size(ctx->comm, &ctx->size));
  MPI_User_function *const fns[ST_DTYPE_COUNT][2] = {
      [ST_BF16] = {bf16_sum, bf16_max}, [ST_FP16] = {fp16_sum, fp16_max}};
  for (int d = ST_BF16; d <= ST_FP16; d++) {
    for (int op = 0; op < 2; op++) MPI_CHECK(MPI_Op_create(fns[d][op], 1, &ctx->half_ops[d][op]));
  }
  return ST_OK;
}

/* A context on a private duplicate of mpi_comm. */
static st_status new_ctx(mpi_ctx **out, MPI_Comm mpi_comm, const st_device *dev) {
  *out = NULL;
  mpi_ctx *ctx = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&ctx, sizeof *ctx, MEM_HOST, MEM_WORKSPACE, NULL));
  ctx->comm = MPI_COMM_NULL;
  for (int d = 0; d < ST_DTYPE_COUNT; d++) ctx->half_ops[d][0] = ctx->half_ops[d][1] = MPI_OP_NULL;
  st_status status = create_ctx(ctx, mpi_comm, dev);
  if (status != ST_OK) {
    mpi_destroy(ctx);
    return status;
  }
  *out = ctx;
  return ST_OK;
}

static st_status mpi_dup(void *vctx, void **out) {
  const mpi_ctx *ctx = vctx;
  mpi_ctx *dup = NULL;
  ST_CHECK(new_ctx(&dup, ctx->comm, &ctx->dev));
  *out = dup;
  return ST_OK;
}

st_status comm_mpi_create(comm **out, MPI_Comm mpi_comm, const char *group_name,
                          const st_device *dev, double timeout_s) {
  *out = NULL;
  mpi_ctx *ctx = NULL;
  ST_CHECK(new_ctx(&ctx, mpi_comm, dev));
  return comm_create(out, &mpi_backend, ctx, group_name, ctx->rank, ctx->size, timeout_s);
}
