/* comm_nccl.c - NCCL backend of comm.h (CUDA builds only; comm_nccl_stub.c stands in
 * otherwise). A collective is enqueued on the stream it is ordered on (the communicator's own
 * when none is given) and followed by its completion event. Barrier is an all-reduce of one
 * float on a device scratch word, since NCCL has no barrier of its own.
 *
 * Creating a communicator is collective, so whatever one rank can fail at alone (its stream and
 * scratch word, rank 0's unique id) is agreed on over the group's MPI communicator first:
 * either every rank enters NCCL's set-up or every rank returns an error. A failure inside
 * NCCL's own set-up, or in the connection NCCL makes on a collective's first enqueue, would
 * leave the other ranks waiting inside the call: each such call runs under a deadline of the
 * communicator's timeout, which ends a waiting rank with one error line (core/deadline.h;
 * docs/ARCHITECTURE.md, "Collectives"). */
#include "sharding/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/check_cuda.h"
#include "core/check_mpi.h"
#include "core/check_nccl.h"
#include "core/deadline.h"
#include "core/log.h"
#include "core/mpi_agree.h"
#include "sharding/comm_mpi.h"

typedef struct nccl_ctx {
  ncclComm_t comm;
  MPI_Comm mpi_comm; /* a duplicate of the group's, owned: the agreement before a duplicate */
  char group_name[32];
  int rank, size;
  int max_ctas;     /* ncclConfig_t's maxCTAs of the communicator and its duplicates */
  double timeout_s; /* the limit on its collective set-up calls, as on its collectives */
  st_device dev;
  st_stream stream;
  float *barrier_word; /* device scratch for the barrier all-reduce */
  int failed; /* a set-up call, an enqueue or the communicator itself reported an error: it is
                 aborted, not destroyed (ncclCommDestroy refuses an errored communicator and
                 would leave its kernels waiting for peers that will never come) */
} nccl_ctx;

typedef struct nccl_work {
  st_event done;
} nccl_work;

_Static_assert(sizeof(nccl_work) <= sizeof(((comm_work *)0)->backend_state),
               "nccl_work must fit in comm_work");

int comm_nccl_available(void) { return 1; }

static ncclDataType_t nccl_type(st_dtype dtype) {
  switch (dtype) {
    case ST_BF16: return ncclBfloat16;
    case ST_FP16: return ncclFloat16;
    default: return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(comm_reduce_op op) { return op == COMM_SUM ? ncclSum : ncclMax; }

/* The stream a collective is enqueued on: the caller's, else the communicator's own. */
static const st_stream *order_of(const nccl_ctx *ctx, const st_stream *stream) {
  return stream ? stream : &ctx->stream;
}

static cudaStream_t cuda_of(const st_stream *stream) { return (cudaStream_t)stream->handle; }

/* The collectives NCCL enqueues for this backend. */
typedef enum nccl_call {
  CALL_ALL_GATHER,
  CALL_REDUCE_SCATTER,
  CALL_ALL_REDUCE,
  CALL_BROADCAST
} nccl_call;

static const char *const call_names[] = {"ncclAllGather", "ncclReduceScatter", "ncclAllReduce",
                                         "ncclBroadcast"};

typedef struct nccl_args {
  const void *send;
  void *recv;
  size_t count; /* elements: each rank's piece for an all-gather or reduce-scatter (comm.h), the
                   whole buffer for an all-reduce or broadcast */
  st_dtype dtype;
  comm_reduce_op op;
  int root;
} nccl_args;

static ncclResult_t call_nccl(nccl_ctx *ctx, nccl_call call, const nccl_args *a, cudaStream_t s) {
  const ncclDataType_t type = nccl_type(a->dtype);
  switch (call) {
    case CALL_ALL_GATHER: return ncclAllGather(a->send, a->recv, a->count, type, ctx->comm, s);
    case CALL_REDUCE_SCATTER:
      return ncclReduceScatter(a->send, a->recv, a->count, type, nccl_op(a->op), ctx->comm, s);
    case CALL_ALL_REDUCE:
      return ncclAllReduce(a->send, a->recv, a->count, type, nccl_op(a->op), ctx->comm, s);
    default: return ncclBroadcast(a->send, a->recv, a->count, type, a->root, ctx->comm, s);
  }
}

/* The error of a call on a communicator nccl_test aborted when NCCL reported an error. */
static st_status aborted_error(const nccl_ctx *ctx) {
  return st_error(ST_ERR_NCCL, "group %s: its NCCL communicator was aborted after an error",
                  ctx->group_name);
}

/* Enqueues one collective on `stream` and records its completion event (created first: once NCCL
 * has the collective, failing would leave it running on buffers the caller takes back). NCCL
 * connects a
 * communicator's ranks on first use, inside the enqueuing call (NCCL_RUNTIME_CONNECT), which
 * then waits for every peer: a peer that never comes would hold this rank there, where the
 * communicator's own timeout (comm_wait) cannot see it, so the call runs under a deadline of
 * that timeout (core/deadline.h). */
static st_status enqueue(nccl_ctx *ctx, nccl_call call, const nccl_args *args,
                         const st_stream *stream, comm_work *work) {
  if (!ctx->comm) return aborted_error(ctx);
  char what[96];
  snprintf(what, sizeof what, "%s on group %s", call_names[call], ctx->group_name);
  nccl_work *w = (nccl_work *)work->backend_state;
  ST_CHECK(event_create(&ctx->dev, &w->done));
  deadline d;
  st_status status = deadline_arm(&d, DEADLINE_COLLECTIVE, ctx->timeout_s, what);
  if (status == ST_OK) {
    const ncclResult_t rc = call_nccl(ctx, call, args, cuda_of(stream));
    deadline_disarm(&d);
    if (rc != ncclSuccess) {
      ctx->failed = 1;
      status = st_error(ST_ERR_NCCL, "%s failed: %s", what, ncclGetErrorString(rc));
    }
  }
  if (status == ST_OK) status = event_record(&w->done, stream);
  if (status != ST_OK) event_destroy(&w->done);
  return status;
}

static st_status nccl_all_gather(void *vctx, const void *send, void *recv, size_t count,
                                 st_dtype dtype, const st_stream *stream, comm_work *work) {
  nccl_ctx *ctx = vctx;
  const nccl_args args = {.send = send, .recv = recv, .count = count, .dtype = dtype};
  return enqueue(ctx, CALL_ALL_GATHER, &args, order_of(ctx, stream), work);
}

static st_status nccl_reduce_scatter(void *vctx, const void *send, void *recv, size_t count,
                                     st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                     comm_work *work) {
  nccl_ctx *ctx = vctx;
  const nccl_args args = {.send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
  return enqueue(ctx, CALL_REDUCE_SCATTER, &args, order_of(ctx, stream), work);
}

static st_status nccl_all_reduce(void *vctx, const void *send, void *recv, size_t count,
                                 st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                 comm_work *work) {
  nccl_ctx *ctx = vctx;
  const nccl_args args = {.send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
  return enqueue(ctx, CALL_ALL_REDUCE, &args, order_of(ctx, stream), work);
}

static st_status nccl_broadcast(void *vctx, void *buf, size_t count, st_dtype dtype, int root,
                                comm_work *work) {
  nccl_ctx *ctx = vctx;
  const nccl_args args = {.send = buf, .recv = buf, .count = count, .dtype = dtype, .root = root};
  return enqueue(ctx, CALL_BROADCAST, &args, &ctx->stream, work);
}

/* An all-reduce of one float on the device scratch word: NCCL has no barrier. */
static st_status nccl_barrier(void *vctx, comm_work *work) {
  nccl_ctx *ctx = vctx;
  const nccl_args args = {.send = ctx->barrier_word,
                          .recv = ctx->barrier_word,
                          .count = 1,
                          .dtype = ST_FP32,
                          .op = COMM_SUM};
  return enqueue(ctx, CALL_ALL_REDUCE, &args, &ctx->stream, work);
}

/* ncclCommAbort or ncclCommDestroy (`call`, named `call_name`) of ctx's communicator under the
 * collective deadline: each waits for NCCL's own streams, which this communicator's kernels, or
 * another stuck one's, can hold, so the deadline's exit ends a rank that would wait for ever
 * (unarmed after st_finalize). The communicator is gone after it, whatever it returns. */
static ncclResult_t end_comm(nccl_ctx *ctx, ncclResult_t (*call)(ncclComm_t),
                             const char *call_name) {
  char what[96];
  snprintf(what, sizeof what, "%s of group %s", call_name, ctx->group_name);
  deadline d;
  /* After st_finalize (MPI finalized) its watchdog is gone, and no other may start. */
  const int armed =
      !comm_mpi_finalized() && deadline_arm(&d, DEADLINE_COLLECTIVE, ctx->timeout_s, what) == ST_OK;
  const ncclResult_t rc = call(ctx->comm);
  if (armed) deadline_disarm(&d);
  ctx->comm = NULL;
  return rc;
}

static st_status nccl_test(void *vctx, comm_work *work, int *done) {
  nccl_ctx *ctx = vctx;
  nccl_work *w = (nccl_work *)work->backend_state;
  if (!ctx->comm) {
    event_destroy(&w->done);
    return aborted_error(ctx);
  }
  ncclResult_t async_err = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(ctx->comm, &async_err);
  if (rc != ncclSuccess || async_err != ncclSuccess) {
    ctx->failed = 1;
    event_destroy(&w->done); /* the work ends here: nobody will test it again */
    /* NCCL's kernels keep waiting for their peers until the communicator is aborted, and a free
     * of any buffer they use (the caller's clean-up) would wait for them: abort it now. */
    (void)end_comm(ctx, ncclCommAbort, "ncclCommAbort");
    NCCL_CHECK(rc);
    NCCL_CHECK(async_err);
  }
  ST_CHECK(event_query(&w->done, done));
  if (*done) event_destroy(&w->done);
  return ST_OK;
}

static const st_event *nccl_done_event(void *vctx, comm_work *work) {
  (void)vctx;
  return &((nccl_work *)work->backend_state)->done;
}

/* Under a deadline (end_comm), so that the caller's MPI_Abort, or the deadline's exit, ends the
 * rank. */
static void nccl_abort(void *vctx) {
  nccl_ctx *ctx = vctx;
  if (ctx->comm) (void)end_comm(ctx, ncclCommAbort, "ncclCommAbort");
}

static void nccl_destroy(void *vctx) {
  nccl_ctx *ctx = vctx;
  if (!ctx) return;
  if (ctx->comm) {
    ncclResult_t async_err = ncclSuccess;
    if (ncclCommGetAsyncError(ctx->comm, &async_err) != ncclSuccess || async_err != ncclSuccess) {
      ctx->failed = 1;
    }
    if (ctx->failed) {
      nccl_abort(ctx);
    } else {
      const ncclResult_t rc = end_comm(ctx, ncclCommDestroy, "ncclCommDestroy");
      if (rc != ncclSuccess) {
        st_log(ST_LOG_WARN, "ncclCommDestroy of group %s: %s", ctx->group_name,
               ncclGetErrorString(rc));
      }
    }
  }
  mem_free(ctx->barrier_word);
  stream_destroy(&ctx->stream);
  /* After MPI_Finalize the duplicate is MPI's to drop (comm_mpi_finalized). */
  if (ctx->mpi_comm != MPI_COMM_NULL && !comm_mpi_finalized()) MPI_Comm_free(&ctx->mpi_comm);
  mem_free(ctx);
}

static st_status nccl_dup(void *vctx, void **out);

static const comm_backend nccl_backend = {
    .name = "nccl",
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .test = nccl_test,
    .done_event = nccl_done_event,
    .dup = nccl_dup,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

/* The context's own stream and barrier word; the NCCL communicator comes after. */
static st_status init_resources(nccl_ctx *ctx, const st_device *dev) {
  ctx->dev = *dev;
  ST_CHECK(device_bind(dev)); /* the stream and NCCL's set-up take the thread's current GPU */
  ST_CHECK(stream_create(dev, &ctx->stream));
  ST_CHECK(mem_alloc((void **)&ctx->barrier_word, sizeof(float), MEM_DEVICE, MEM_COMM, dev));
  return stream_memset(&ctx->stream, ctx->barrier_word, 0, sizeof(float));
}

/* The configuration every communicator is created with. Blocking: every call returns finished
 * (never ncclInProgress; setup_result names NCCL_COMM_BLOCKING=0, which overrides it). maxCTAs
 * bounds the thread blocks (one per channel, each on an SM) a collective launches: NCCL's
 * default (up to 64 channels in 2.28) would let the stream-ordered collectives that overlap the
 * matmuls take a large share of an H100's 132 SMs from them, per communicator. minCTAs stays
 * NCCL's 1 and cgaClusterSize NCCL's default (4 on sm_90): nothing measured yet says another is
 * better. */
static ncclConfig_t config_of(const nccl_ctx *ctx) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.minCTAs = 1;
  config.maxCTAs = ctx->max_ctas;
  return config;
}

static st_status new_unique_id(ncclUniqueId *id) {
  NCCL_CHECK(ncclGetUniqueId(id));
  return ST_OK;
}

/* The verdict of group `group_name` (over `over`) on what each rank did alone, before the
 * collective all of them must make next (`call`), so that none waits inside it for a rank that
 * will never arrive. */
static st_status agree_before(MPI_Comm over, const char *group_name, st_status mine,
                              const char *call) {
  char step[96];
  snprintf(step, sizeof step, "NCCL set-up (%s) of group %s", call, group_name);
  return mpi_agree_naming(over, mine, step);
}

/* Every field of a context that its NCCL communicator does not need, ending in the private MPI
 * communicator the agreements run on. */
static st_status init_common(nccl_ctx *ctx, MPI_Comm mpi_comm, const char *group_name, int max_ctas,
                             double timeout_s) {
  snprintf(ctx->group_name, sizeof ctx->group_name, "%s", group_name);
  ctx->max_ctas = max_ctas;
  ctx->timeout_s = timeout_s;
  MPI_CHECK(MPI_Comm_dup(mpi_comm, &ctx->mpi_comm));
  MPI_CHECK(MPI_Comm_rank(ctx->mpi_comm, &ctx->rank));
  MPI_CHECK(MPI_Comm_size(ctx->mpi_comm, &ctx->size));
  return ST_OK;
}

/* Arms the deadline of NCCL's collective set-up call `call`: every rank of the group waits inside
 * it for the others, so one that fails or stalls there would hold the rest for ever. */
static st_status arm_setup_deadline(const nccl_ctx *ctx, const char *call, deadline *d) {
  char what[128];
  snprintf(what, sizeof what, "NCCL set-up (%s) of group %s", call, ctx->group_name);
  return deadline_arm(d, DEADLINE_COLLECTIVE, ctx->timeout_s, what);
}

/* What a rank did alone before set-up call `call` (`mine`), then the call's deadline armed,
 * agreed on over the group: on ST_OK every rank holds the armed deadline `d`, to disarm after
 * the call; otherwise none does, and none makes the call. */
static st_status arm_and_agree(const nccl_ctx *ctx, st_status mine, const char *call, deadline *d) {
  if (mine == ST_OK) mine = arm_setup_deadline(ctx, call, d);
  const st_status agreed = agree_before(ctx->mpi_comm, ctx->group_name, mine, call);
  if (agreed != ST_OK && mine == ST_OK) deadline_disarm(d);
  return agreed;
}

/* The status of a finished set-up call of `ctx`, naming it; a failure marks the context failed. */
static st_status setup_result(nccl_ctx *ctx, ncclResult_t result, const char *call) {
  if (result == ncclSuccess) return ST_OK;
  ctx->failed = 1;
  if (result == ncclInProgress) {
    return st_error(ST_ERR_NCCL,
                    "%s returned before finishing (ncclInProgress): NCCL_COMM_BLOCKING=0 (in the "
                    "environment or an NCCL configuration file) is not supported; unset it",
                    call);
  }
  return st_error(ST_ERR_NCCL, "%s failed: %s", call, ncclGetErrorString(result));
}

/* Rank 0's unique id to every rank, then the communicator. */
static st_status make_comm(nccl_ctx *ctx, ncclUniqueId *id) {
  MPI_CHECK(MPI_Bcast(id, sizeof *id, MPI_BYTE, 0, ctx->mpi_comm));
  ncclConfig_t config = config_of(ctx);
  return setup_result(ctx, ncclCommInitRankConfig(&ctx->comm, ctx->size, *id, ctx->rank, &config),
                      "ncclCommInitRankConfig");
}

static st_status init_ctx(nccl_ctx *ctx, const st_device *dev) {
  ncclUniqueId id;
  st_status mine = init_resources(ctx, dev);
  if (mine == ST_OK && ctx->rank == 0) mine = new_unique_id(&id);
  deadline d;
  ST_CHECK(arm_and_agree(ctx, mine, "ncclCommInitRankConfig", &d));
  const st_status status = make_comm(ctx, &id);
  deadline_disarm(&d);
  return status;
}

/* The duplicate is split from the communicator with one colour, keeping the ranks. */
static st_status dup_ctx(nccl_ctx *dup, const nccl_ctx *ctx) {
  ST_CHECK(init_common(dup, ctx->mpi_comm, ctx->group_name, ctx->max_ctas, ctx->timeout_s));
  deadline d;
  ST_CHECK(arm_and_agree(dup, init_resources(dup, &ctx->dev), "ncclCommSplit", &d));
  ncclConfig_t config = config_of(dup);
  const ncclResult_t made = ncclCommSplit(ctx->comm, 0, ctx->rank, &dup->comm, &config);
  deadline_disarm(&d);
  return setup_result(dup, made, "ncclCommSplit");
}

/* A context with nothing to release yet (its MPI communicator is the only field whose empty
 * value is not zero), agreed on over `parent` with `mine`, this rank's verdict so far (ST_OK, or
 * why it cannot go on), then that of its allocation, which is what a rank can fail at alone
 * before the first collective of the set-up, the MPI_Comm_dup of init_common, where the other
 * ranks would otherwise wait for it forever. On failure *out stays NULL on the ranks that could
 * not allocate and is freed on the others. */
static st_status new_ctx(MPI_Comm parent, const char *group_name, st_status mine, nccl_ctx **out) {
  *out = NULL;
  if (mine == ST_OK) {
    mine = mem_alloc_zeroed((void **)out, sizeof **out, MEM_HOST, MEM_WORKSPACE, NULL);
  }
  if (mine == ST_OK) (*out)->mpi_comm = MPI_COMM_NULL;
  const st_status status = agree_before(parent, group_name, mine, "MPI_Comm_dup");
  if (status != ST_OK) {
    mem_free(*out);
    *out = NULL;
  }
  return status;
}

static st_status nccl_dup(void *vctx, void **out) {
  *out = NULL;
  const nccl_ctx *parent = vctx;
  /* An aborted parent (an asynchronous error, perhaps seen by this rank alone) fails the
   * duplicate on every rank, through the agreement the others wait in. */
  nccl_ctx *dup = NULL;
  ST_CHECK(new_ctx(parent->mpi_comm, parent->group_name,
                   parent->comm ? ST_OK : aborted_error(parent), &dup));
  st_status status = dup_ctx(dup, vctx);
  if (status != ST_OK) {
    nccl_destroy(dup);
    return status;
  }
  *out = dup;
  return ST_OK;
}

st_status comm_nccl_create(comm **out, MPI_Comm mpi_comm, const char *group_name,
                           const st_device *dev, double timeout_s, int max_ctas) {
  *out = NULL;
  if (dev->backend->kind != ST_DEVICE_CUDA) {
    return st_error(ST_ERR_INVALID_ARG, "the NCCL backend needs a CUDA device");
  }
  if (max_ctas < 1 || max_ctas > ST_NCCL_MAX_CTAS_LIMIT) {
    return st_error(ST_ERR_INVALID_ARG, "NCCL max CTAs %d is outside 1..%d", max_ctas,
                    ST_NCCL_MAX_CTAS_LIMIT);
  }
  nccl_ctx *ctx = NULL;
  ST_CHECK(new_ctx(mpi_comm, group_name, ST_OK, &ctx));
  st_status status = init_common(ctx, mpi_comm, group_name, max_ctas, timeout_s);
  if (status == ST_OK) status = init_ctx(ctx, dev);
  if (status != ST_OK) {
    nccl_destroy(ctx);
    return status;
  }
  return comm_create(out, &nccl_backend, ctx, group_name, ctx->rank, ctx->size, timeout_s);
}
