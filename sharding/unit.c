/* unit.c - a unit's buffers per ZeRO policy and precision, and its collectives: gather,
 * release, gradient reduction and parameter publishing (see unit.h for the table). The
 * collectives of a step are ordered on the streams of unit_streams.h by events; the transient
 * full-unit buffers come from and go back to its pool. */
#include "sharding/unit.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static size_t bytes_of(st_dtype dtype, int64_t n) { return (size_t)n * dtype_size(dtype); }

/* Element i of a buffer of `dtype`. */
static void *element(void *base, st_dtype dtype, int64_t i) {
  return (char *)base + bytes_of(dtype, i);
}

static int shards_of(const unit *u) { return u->layout.S; }

static st_status check_precision(const char *name, const st_device *dev, unit_precision p) {
  if ((unsigned)p.param >= ST_DTYPE_COUNT || (unsigned)p.reduce >= ST_DTYPE_COUNT) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: param dtype %d or reduce dtype %d is not a dtype",
                    name, (int)p.param, (int)p.reduce);
  }
  st_status status = device_check_param_dtype(dev, p.param);
  if (status != ST_OK) {
    return st_error(status, "unit %s: %s", name, st_last_error());
  }
  return ST_OK;
}

/* Whether a buffer of `dtype` needs an fp32 compute copy on `dev` (unit.h). */
static int needs_copy(const st_device *dev, st_dtype dtype) {
  return dtype != ST_FP32 && !kernel_kind_computes_in(dev->backend->kind, dtype);
}

st_status unit_init(unit *u, const char *name, const st_device *dev, int stage,
                    const unit_precision *precision, const unit_groups *groups, int T, int t) {
  memset(u, 0, sizeof *u);
  if (strlen(name) > ST_UNIT_NAME_MAX) {
    return st_error(ST_ERR_INVALID_ARG, "unit name '%.20s...' has %zu characters, more than %d",
                    name, strlen(name), ST_UNIT_NAME_MAX);
  }
  snprintf(u->name, sizeof u->name, "%s", name);
  u->dev = dev;
  if (unit_policy_for_stage(stage, &u->policy) != ST_OK) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: %s", name, st_last_error());
  }
  if (precision) u->precision = *precision;
  ST_CHECK(check_precision(u->name, dev, u->precision));
  u->copies_params = needs_copy(dev, u->precision.param);
  u->copies_grads = needs_copy(dev, u->precision.reduce);
  int S = 1;
  if (!groups && u->policy.shard_optimizer) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: ZeRO stage %d needs a mesh", name, stage);
  }
  if (groups) {
    u->groups = *groups;
    S = comm_size(groups->shard);
    u->shard_rank = comm_rank(groups->shard);
  }
  return unit_layout_init(&u->layout, S, T, t);
}

void unit_use_kernels(unit *u, const kernel_backend *kb) { u->kb = kb; }

st_status unit_declare(unit *u, const char *name, int ndim, const int64_t *shape, tp_split split,
                       int blocks, int *index) {
  if (u->master) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: parameter %s declared after allocation", u->name,
                    name);
  }
  ST_CHECK(unit_layout_add(&u->layout, name, ndim, shape, split, blocks));
  if (index) *index = u->layout.count - 1;
  return ST_OK;
}

static st_status alloc_zeroed(void **out, size_t bytes, mem_category category, const unit *u) {
  ST_CHECK(mem_alloc(out, bytes, MEM_DEVICE, category, u->dev));
  ST_CHECK(stream_memset(&u->stream, *out, 0, bytes));
  return stream_sync(&u->stream);
}

st_status unit_share_streams(unit *u, unit_streams *streams) {
  if (u->master) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: streams shared after allocation", u->name);
  }
  if (streams->groups.shard != u->groups.shard ||
      streams->groups.replicate != u->groups.replicate) {
    return st_error(ST_ERR_INTERNAL, "unit %s: shared streams of other groups", u->name);
  }
  u->streams = streams;
  return ST_OK;
}

st_status unit_host_wait(unit *u) { return unit_streams_step_end(u->streams); }

/* The unit's own streams when none are shared, and its events. */
static st_status create_streams(unit *u) {
  if (!u->streams) {
    ST_CHECK(unit_streams_create(&u->private_streams, u->dev, &u->stream,
                                 u->groups.shard ? &u->groups : NULL));
    u->streams = &u->private_streams;
  }
  ST_CHECK(event_create(u->dev, &u->grads_ready));
  ST_CHECK(event_create(u->dev, &u->reduced));
  ST_CHECK(event_create(u->dev, &u->params_read));
  return event_create(u->dev, &u->updated);
}

st_status unit_offload_optimizer(unit *u) {
  if (u->master) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: optimizer offload chosen after allocation",
                    u->name);
  }
  u->offload_optimizer = 1;
  u->offload_staging = !u->dev->backend->device_memory_is_host;
  return ST_OK;
}

/* fp32 master, m or v of the owned range, zero-filled: device memory, or host memory that the
 * host zeroes itself when offloaded. */
static st_status alloc_state(float **out, const unit *u) {
  const size_t bytes = bytes_of(ST_FP32, u->owned_numel);
  if (!u->offload_optimizer) return alloc_zeroed((void **)out, bytes, MEM_OPTIMIZER, u);
  return mem_alloc_zeroed((void **)out, bytes, MEM_PINNED, MEM_OPTIMIZER_HOST, u->dev);
}

/* Zeroes a state buffer from alloc_state. */
static st_status zero_state(float *state, const unit *u) {
  const size_t bytes = bytes_of(ST_FP32, u->owned_numel);
  if (!u->offload_optimizer) return stream_memset(&u->stream, state, 0, bytes);
  ST_CHECK(stream_sync(&u->stream)); /* earlier copies into it are complete */
  memset(state, 0, bytes);
  return ST_OK;
}

st_status unit_allocate(unit *u) {
  const int64_t numel = u->layout.numel, shard = u->layout.shard_numel;
  const st_dtype p = u->precision.param, g = u->precision.reduce;
  const unit_policy *pol = &u->policy;
  u->owned_begin = pol->shard_optimizer ? (int64_t)u->shard_rank * shard : 0;
  u->owned_numel = pol->shard_optimizer ? shard : numel;
  if (!u->kb && (u->copies_params || u->copies_grads)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "unit %s: its fp32 compute copies need a kernel backend (unit_use_kernels)",
                    u->name);
  }
  ST_CHECK(stream_create(u->dev, &u->stream));
  st_status status;
  ST_CHECK_GOTO(create_streams(u), status, fail);
  if (pol->shard_params) {
    ST_CHECK_GOTO(alloc_zeroed(&u->param_shard, bytes_of(p, shard), MEM_PARAMS, u), status, fail);
  } else {
    ST_CHECK_GOTO(alloc_zeroed(&u->params, bytes_of(p, numel), MEM_PARAMS, u), status, fail);
    u->param_shard = element(u->params, p, u->owned_begin);
  }
  if (!pol->shard_grads) {
    ST_CHECK_GOTO(alloc_zeroed(&u->grads, bytes_of(g, numel), MEM_GRADS, u), status, fail);
    u->grad_shard = element(u->grads, g, (int64_t)u->shard_rank * shard);
  } else {
    ST_CHECK_GOTO(alloc_zeroed(&u->grad_shard, bytes_of(g, shard), MEM_GRADS, u), status, fail);
  }
  ST_CHECK_GOTO(alloc_state(&u->master, u), status, fail);
  ST_CHECK_GOTO(alloc_state(&u->adam_m, u), status, fail);
  ST_CHECK_GOTO(alloc_state(&u->adam_v, u), status, fail);
  return ST_OK;
fail:
  unit_free(u);
  return status;
}

/* Waits on the host for a collective that a failed call left in flight (its work record still
 * active), so that no buffer it reads or writes is freed or reused under it. */
static void drain_in_flight(unit *u) {
  if (u->reduce_work.active) (void)comm_wait(&u->reduce_work);
  if (u->gather_work.active) (void)comm_wait(&u->gather_work);
  u->reduce_pending = u->gather_pending = 0;
}

void unit_free(unit *u) {
  drain_in_flight(u);
  mem_free(u->adam_v);
  mem_free(u->adam_m);
  mem_free(u->master);
  mem_free(u->compute_grads);
  mem_free(u->compute_params);
  if (u->policy.shard_grads) mem_free(u->grad_shard);
  mem_free(u->grads);
  if (u->policy.shard_params) mem_free(u->param_shard);
  mem_free(u->params);
  u->adam_v = u->adam_m = u->master = u->compute_grads = u->compute_params = NULL;
  u->grad_shard = u->grads = u->param_shard = u->params = NULL;
  event_destroy(&u->updated);
  event_destroy(&u->params_read);
  event_destroy(&u->reduced);
  event_destroy(&u->grads_ready);
  if (u->streams == &u->private_streams) unit_streams_destroy(&u->private_streams);
  u->streams = NULL;
  stream_destroy(&u->stream);
  unit_layout_free(&u->layout);
}

/* ---- fp32 compute copies (where the kernels lack the dtype: the CPU) ----------------------- */

/* Elements [first, first + n) of dst = those of src converted (both of the unit's full flat
 * length), by the kernel backend's cast on C: in order with the model's work that reads and
 * writes the copies, with no host wait. */
static st_status cast_range(const unit *u, void *dst, st_dtype dst_dtype, const void *src,
                            st_dtype src_dtype, int64_t first, int64_t n) {
  st_tensor to, from;
  ST_CHECK(
      tensor_make(&to, element(dst, dst_dtype, first), dst_dtype, u->dev->backend->kind, 1, &n));
  ST_CHECK(tensor_make(&from, element((void *)src, src_dtype, first), src_dtype,
                       u->dev->backend->kind, 1, &n));
  return kernel_cast(u->kb, &to, &from, u->streams->compute);
}

static st_status cast_all(const unit *u, void *dst, st_dtype dst_dtype, const void *src,
                          st_dtype src_dtype) {
  return cast_range(u, dst, dst_dtype, src, src_dtype, 0, u->layout.numel);
}

/* A transient full-unit buffer (category GATHERED) for work on C, and its return after the
 * work enqueued so far on `reader`. */
static st_status take(unit *u, void **out, st_dtype dtype) {
  return buffer_pool_get(&u->streams->pool, bytes_of(dtype, u->layout.numel), MEM_GATHERED,
                         u->streams->compute, out);
}

static void give_back(unit *u, void **buf, st_dtype dtype, const st_stream *reader) {
  buffer_pool_put(&u->streams->pool, *buf, bytes_of(dtype, u->layout.numel), MEM_GATHERED, &reader,
                  1);
  *buf = NULL;
}

static st_status copy_in(float **copy, const void *from, st_dtype dtype, unit *u) {
  if (!*copy) ST_CHECK(take(u, (void **)copy, ST_FP32));
  return cast_all(u, *copy, ST_FP32, from, dtype);
}

/* The fp32 compute copy of parameters [first, first + n), from the parameters. */
static st_status refresh_compute_params(unit *u, int64_t first, int64_t n) {
  if (!u->compute_params) return ST_OK;
  return cast_range(u, u->compute_params, ST_FP32, u->params, u->precision.param, first, n);
}

/* ---- parameters ------------------------------------------------------------------------- */

/* Copies `count` host fp32 values into device memory of `dtype`, converting on the host. */
static st_status upload(unit *u, void *dst, st_dtype dtype, const float *values, int64_t count) {
  if (dtype == ST_FP32) return stream_memcpy(&u->stream, dst, values, bytes_of(ST_FP32, count));
  void *staging = NULL;
  ST_CHECK(mem_alloc(&staging, bytes_of(dtype, count), MEM_HOST, MEM_WORKSPACE, NULL));
  dtype_convert(staging, dtype, values, ST_FP32, (size_t)count);
  st_status status = stream_memcpy(&u->stream, dst, staging, bytes_of(dtype, count));
  if (status == ST_OK) status = stream_sync(&u->stream);
  mem_free(staging);
  return status;
}

st_status unit_set_params(unit *u, int64_t first, const float *values, int64_t count) {
  if (first < 0 || count < 0 || first + count > u->layout.numel) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: elements [%lld, %lld) outside its %lld", u->name,
                    (long long)first, (long long)(first + count), (long long)u->layout.numel);
  }
  const st_dtype p = u->precision.param;
  const int64_t owned_end = u->owned_begin + u->owned_numel;
  const int64_t lo = first > u->owned_begin ? first : u->owned_begin;
  const int64_t hi = first + count < owned_end ? first + count : owned_end;
  if (lo < hi) {
    ST_CHECK(stream_memcpy(&u->stream, u->master + (lo - u->owned_begin), values + (lo - first),
                           bytes_of(ST_FP32, hi - lo)));
    if (u->policy.shard_params) {
      ST_CHECK(upload(u, element(u->param_shard, p, lo - u->owned_begin), p, values + (lo - first),
                      hi - lo));
    }
  }
  if (u->params) ST_CHECK(upload(u, element(u->params, p, first), p, values, count));
  ST_CHECK(stream_sync(&u->stream));
  return refresh_compute_params(u, first, count);
}

void unit_kept_range(const unit *u, int64_t *begin, int64_t *end) {
  *begin = u->params ? 0 : u->owned_begin;
  *end = u->params ? u->layout.numel : u->owned_begin + u->owned_numel;
}

st_status unit_gather_start(unit *u) {
  if (u->policy.gather_params == UNIT_PARAMS_KEPT || u->params || u->gather_pending) return ST_OK;
  const st_dtype p = u->precision.param;
  unit_streams *s = u->streams;
  /* G waits "buffer free": the pool orders it after the buffer's last readers. */
  ST_CHECK(buffer_pool_get(&s->pool, bytes_of(p, u->layout.numel), MEM_GATHERED, &s->gather,
                           &u->params));
  st_status status = comm_all_gather_on(s->gather_comm, &s->gather, u->param_shard, u->params,
                                        (size_t)u->layout.shard_numel, p, &u->gather_work);
  if (status != ST_OK) {
    give_back(u, &u->params, p, &s->gather);
    return status;
  }
  u->gather_pending = 1;
  return ST_OK;
}

st_status unit_gather_wait(unit *u) {
  ST_CHECK(unit_gather_start(u));
  if (u->gather_pending) {
    u->gather_pending = 0;
    /* C waits gathered(u) */
    ST_CHECK(comm_exposure_order_after(&u->streams->exposure, &u->gather_work));
  }
  if (u->copies_params && !u->compute_params) {
    ST_CHECK(copy_in(&u->compute_params, u->params, u->precision.param, u));
  }
  return ST_OK;
}

void unit_release(unit *u) {
  const st_stream *c = u->streams->compute;
  give_back(u, (void **)&u->compute_params, ST_FP32, c);
  if (u->policy.gather_params == UNIT_PARAMS_KEPT || u->gather_pending) return;
  give_back(u, &u->params, u->precision.param, c);
}

/* ---- gradients -------------------------------------------------------------------------- */

st_status unit_grads_begin(unit *u) {
  const st_dtype g = u->precision.reduce;
  if (!u->grads) {
    ST_CHECK(take(u, &u->grads, g));
    st_status status =
        stream_memset(u->streams->compute, u->grads, 0, bytes_of(g, u->layout.numel));
    if (status != ST_OK) {
      give_back(u, &u->grads, g, u->streams->compute);
      return status;
    }
  }
  if (u->copies_grads && !u->compute_grads) ST_CHECK(copy_in(&u->compute_grads, u->grads, g, u));
  return ST_OK;
}

st_status unit_grads_end(unit *u) {
  if (!u->compute_grads) return ST_OK;
  ST_CHECK(cast_all(u, u->grads, u->precision.reduce, u->compute_grads, ST_FP32));
  give_back(u, (void **)&u->compute_grads, ST_FP32, u->streams->compute);
  return ST_OK;
}

st_status unit_grads_zero(unit *u) {
  if (!u->grads) return ST_OK;
  const st_stream *c = u->streams->compute;
  ST_CHECK(stream_memset(c, u->grads, 0, bytes_of(u->precision.reduce, u->layout.numel)));
  if (u->compute_grads) {
    ST_CHECK(stream_memset(c, u->compute_grads, 0, bytes_of(ST_FP32, u->layout.numel)));
  }
  return ST_OK;
}

st_status unit_reduce_start(unit *u) {
  if (!u->grads) {
    return st_error(ST_ERR_INTERNAL, "unit %s: reduce without gradients", u->name);
  }
  ST_CHECK(unit_grads_end(u));
  unit_streams *s = u->streams;
  if (!s->reduce_comm) return ST_OK; /* one rank, stage 0: the gradients are complete */
  ST_CHECK(event_record(&u->grads_ready, s->compute));      /* C records grads-ready(u) */
  ST_CHECK(stream_wait_event(&s->reduce, &u->grads_ready)); /* R waits it */
  ST_CHECK(comm_reduce_scatter_on(s->reduce_comm, &s->reduce, u->grads, u->grad_shard,
                                  (size_t)u->layout.shard_numel, u->precision.reduce, COMM_SUM,
                                  &u->reduce_work));
  u->reduce_pending = 1;
  return ST_OK;
}

/* R is ordered after a collective just started on it, unless it failed to start. */
static st_status then_on_reduce(unit *u, st_status started, comm_work *work) {
  ST_CHECK(started);
  return comm_order_after(work, &u->streams->reduce);
}

/* R finishes u's reduction: the reduce-scatter started, the replicate all-reduce, stage 0's
 * all-gather back; then records reduced(u), for which C waits. */
static st_status finish_reduce(unit *u) {
  unit_streams *s = u->streams;
  const st_stream *r = &s->reduce;
  const size_t shard = (size_t)u->layout.shard_numel;
  const st_dtype g = u->precision.reduce;
  ST_CHECK(comm_order_after(&u->reduce_work, r)); /* MPI: the host completes it here */
  comm_work work;
  if (s->replicate_comm) {
    ST_CHECK(then_on_reduce(u,
                            comm_all_reduce_on(s->replicate_comm, r, u->grad_shard, u->grad_shard,
                                               shard, g, COMM_SUM, &work),
                            &work));
  }
  if (u->policy.gather_grads && shards_of(u) > 1) {
    ST_CHECK(then_on_reduce(
        u, comm_all_gather_on(s->reduce_comm, r, u->grad_shard, u->grads, shard, g, &work), &work));
  }
  ST_CHECK(event_record(&u->reduced, r));            /* R records reduced(u) */
  return stream_wait_event(s->compute, &u->reduced); /* C waits it */
}

st_status unit_reduce_wait(unit *u) {
  if (!u->reduce_pending) return ST_OK;
  /* C's wait spans the host's: where collectives complete on the host (MPI), the host
   * finishes R's work here, and C (the host on the CPU) waits meanwhile. On one rank the
   * "reduction" is a copy, not communication, and is not counted. */
  unit_streams *s = u->streams;
  const int communicates = shards_of(u) > 1 || s->replicate_comm;
  st_status status = communicates ? comm_exposure_begin(&s->exposure) : ST_OK;
  const int timed = communicates && status == ST_OK;
  if (status == ST_OK) status = finish_reduce(u);
  if (status != ST_OK) {
    /* The reduce-scatter started may still be in flight: it is waited for before the error
     * goes up, or the caller's destroy would free buffers it still writes. */
    drain_in_flight(u);
    if (timed) comm_exposure_discard(&s->exposure);
    return status;
  }
  u->reduce_pending = 0;
  if (timed) ST_CHECK(comm_exposure_end(&s->exposure));
  /* reused after reduced(u) */
  if (u->policy.transient_grads) give_back(u, &u->grads, u->precision.reduce, &s->reduce);
  return ST_OK;
}

st_status unit_reduce_handoff(unit *u, unit *earlier) {
  if (earlier) ST_CHECK(unit_reduce_wait(earlier));
  return unit_reduce_start(u);
}

/* ---- optimizer -------------------------------------------------------------------------- */

void *unit_owned_grads(const unit *u) {
  return u->policy.shard_optimizer ? u->grad_shard : u->grads;
}

void *unit_owned_params(const unit *u) { return u->param_shard; }

st_status unit_optimizer_reset(unit *u) {
  if (u->precision.param == ST_FP32) {
    ST_CHECK(
        stream_memcpy(&u->stream, u->master, u->param_shard, bytes_of(ST_FP32, u->owned_numel)));
  }
  ST_CHECK(zero_state(u->adam_m, u));
  ST_CHECK(zero_state(u->adam_v, u));
  return stream_sync(&u->stream);
}

void unit_owned_part(const unit *u, int k, int64_t *lo, int64_t *hi) {
  const unit_param *p = &u->layout.params[k];
  const int64_t owned_end = u->owned_begin + u->owned_numel;
  *lo = p->offset > u->owned_begin ? p->offset : u->owned_begin;
  const int64_t end = p->offset + p->numel;
  *hi = end < owned_end ? end : owned_end;
  if (*hi < *lo) { /* none: an empty range inside the parameter's, at its nearest end */
    if (*lo > end) *lo = end;
    *hi = *lo;
  }
}

st_status unit_restore_owned(unit *u, int64_t first, int64_t count, const float *master,
                             const float *adam_m, const float *adam_v) {
  const int64_t at = first - u->owned_begin;
  if (at < 0 || count < 0 || at + count > u->owned_numel) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: elements [%lld, %lld) outside its owned range",
                    u->name, (long long)first, (long long)(first + count));
  }
  const size_t bytes = bytes_of(ST_FP32, count);
  ST_CHECK(stream_memcpy(&u->stream, u->master + at, master, bytes));
  ST_CHECK(stream_memcpy(&u->stream, u->adam_m + at, adam_m, bytes));
  ST_CHECK(stream_memcpy(&u->stream, u->adam_v + at, adam_v, bytes));
  ST_CHECK(upload(u, element(u->param_shard, u->precision.param, at), u->precision.param, master,
                  count));
  return stream_sync(&u->stream);
}

st_status unit_optimizer_begin(unit *u) {
  ST_CHECK(event_record(&u->params_read, u->streams->compute));
  return stream_wait_event(&u->stream, &u->params_read);
}

st_status unit_publish(unit *u) {
  unit_streams *s = u->streams;
  ST_CHECK(event_record(&u->updated, &u->stream)); /* the owned parameters' writes through it */
  ST_CHECK(stream_wait_event(&s->gather, &u->updated));
  if (u->policy.publish_params && shards_of(u) > 1) {
    /* On G after C's reads of the full parameters so far; C reads the new ones after it. */
    ST_CHECK(event_record(&u->params_read, s->compute));
    ST_CHECK(stream_wait_event(&s->gather, &u->params_read));
    comm_work work;
    ST_CHECK(comm_all_gather_on(s->gather_comm, &s->gather, u->param_shard, u->params,
                                (size_t)u->layout.shard_numel, u->precision.param, &work));
    ST_CHECK(comm_exposure_order_after(&s->exposure, &work));
  } else {
    ST_CHECK(stream_wait_event(s->compute, &u->updated));
  }
  return refresh_compute_params(u, 0, u->layout.numel);
}

st_status unit_gather_master(unit *u, float *out) {
  if (!u->policy.shard_optimizer) {
    ST_CHECK(stream_memcpy(&u->stream, out, u->master, bytes_of(ST_FP32, u->layout.numel)));
    return stream_sync(&u->stream);
  }
  const size_t shard = (size_t)u->layout.shard_numel;
  if (!u->offload_optimizer) {
    return comm_all_gather(u->groups.shard, u->master, out, shard, ST_FP32, NULL);
  }
  float *staged = NULL; /* one-off, like the export scratch that calls this */
  ST_CHECK(mem_alloc((void **)&staged, bytes_of(ST_FP32, (int64_t)shard), MEM_DEVICE, MEM_WORKSPACE,
                     u->dev));
  st_status status =
      stream_memcpy(&u->stream, staged, u->master, bytes_of(ST_FP32, (int64_t)shard));
  if (status == ST_OK) status = stream_sync(&u->stream);
  if (status == ST_OK) status = comm_all_gather(u->groups.shard, staged, out, shard, ST_FP32, NULL);
  mem_free(staged);
  return status;
}

/* ---- descriptors ------------------------------------------------------------------------ */

static st_tensor view(const unit *u, void *base, st_dtype dtype, int index) {
  const unit_param *p = &u->layout.params[index];
  st_tensor t;
  /* unit_layout bounds every parameter (UNIT_MAX_NUMEL), so this cannot fail; if it ever did,
   * the descriptor has no data and ndim 0, which callers can test, and st_last_error says why. */
  if (tensor_make(&t, base ? element(base, dtype, p->offset) : NULL, dtype, u->dev->backend->kind,
                  p->ndim, p->local_shape) != ST_OK) {
    memset(&t, 0, sizeof t);
  }
  return t;
}

st_tensor unit_param_tensor(const unit *u, int index) {
  if (u->compute_params) return view(u, u->compute_params, ST_FP32, index);
  return view(u, u->params, u->precision.param, index);
}

st_tensor unit_grad_tensor(const unit *u, int index) {
  if (u->compute_grads) return view(u, u->compute_grads, ST_FP32, index);
  return view(u, u->grads, u->precision.reduce, index);
}
