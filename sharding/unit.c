/* unit.c - a unit's buffers per ZeRO stage and its collectives: gather, release, gradient
 * reduction and parameter publishing (see unit.h for the table). */
#include "sharding/unit.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static size_t floats(int64_t n) { return (size_t)n * sizeof(float); }

static int shards_of(const unit *u) { return u->layout.S; }

st_status unit_init(unit *u, const char *name, const st_device *dev, int stage,
                    const unit_groups *groups, int T, int t) {
  memset(u, 0, sizeof *u);
  snprintf(u->name, sizeof u->name, "%s", name);
  u->dev = dev;
  u->stage = stage;
  if (stage < 0 || stage > 3) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: ZeRO stage %d is not 0, 1, 2 or 3", name, stage);
  }
  int S = 1;
  if (!groups && stage != 0) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: ZeRO stage %d needs a mesh", name, stage);
  }
  if (groups) {
    u->groups = *groups;
    S = comm_size(groups->shard);
    u->shard_rank = comm_rank(groups->shard);
  }
  return unit_layout_init(&u->layout, S, T, t);
}

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

static st_status alloc_zeroed(float **out, int64_t n, mem_category category, const unit *u) {
  ST_CHECK(mem_alloc((void **)out, floats(n), MEM_DEVICE, category, u->dev));
  ST_CHECK(stream_memset(&u->stream, *out, 0, floats(n)));
  return stream_sync(&u->stream);
}

st_status unit_allocate(unit *u) {
  const int64_t numel = u->layout.numel, shard = u->layout.shard_numel;
  u->owned_begin = u->stage == 0 ? 0 : (int64_t)u->shard_rank * shard;
  u->owned_numel = u->stage == 0 ? numel : shard;
  ST_CHECK(stream_create(u->dev, &u->stream));
  st_status status;
  if (u->stage == 3) {
    ST_CHECK_GOTO(alloc_zeroed(&u->param_shard, shard, MEM_PARAMS, u), status, fail);
  } else {
    ST_CHECK_GOTO(alloc_zeroed(&u->params, numel, MEM_PARAMS, u), status, fail);
    u->param_shard = u->params + u->owned_begin;
  }
  if (u->stage <= 1) {
    ST_CHECK_GOTO(alloc_zeroed(&u->grads, numel, MEM_GRADS, u), status, fail);
    u->grad_shard = u->grads + (int64_t)u->shard_rank * shard;
  } else {
    ST_CHECK_GOTO(alloc_zeroed(&u->grad_shard, shard, MEM_GRADS, u), status, fail);
  }
  ST_CHECK_GOTO(alloc_zeroed(&u->master, u->owned_numel, MEM_OPTIMIZER, u), status, fail);
  ST_CHECK_GOTO(alloc_zeroed(&u->adam_m, u->owned_numel, MEM_OPTIMIZER, u), status, fail);
  ST_CHECK_GOTO(alloc_zeroed(&u->adam_v, u->owned_numel, MEM_OPTIMIZER, u), status, fail);
  return ST_OK;
fail:
  unit_free(u);
  return status;
}

void unit_free(unit *u) {
  mem_free(u->adam_v);
  mem_free(u->adam_m);
  mem_free(u->master);
  if (u->stage >= 2) mem_free(u->grad_shard);
  mem_free(u->grads);
  if (u->stage == 3) mem_free(u->param_shard);
  mem_free(u->params);
  u->adam_v = u->adam_m = u->master = u->grad_shard = u->grads = NULL;
  u->param_shard = u->params = NULL;
  stream_destroy(&u->stream);
  unit_layout_free(&u->layout);
}

st_status unit_set_params(unit *u, int64_t first, const float *values, int64_t count) {
  if (first < 0 || count < 0 || first + count > u->layout.numel) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: elements [%lld, %lld) outside its %lld", u->name,
                    (long long)first, (long long)(first + count), (long long)u->layout.numel);
  }
  st_status status = ST_OK;
  if (u->params) status = stream_memcpy(&u->stream, u->params + first, values, floats(count));
  if (status == ST_OK && u->stage == 3) {
    int64_t lo = first > u->owned_begin ? first : u->owned_begin;
    int64_t end = u->owned_begin + u->owned_numel;
    int64_t hi = first + count < end ? first + count : end;
    if (lo < hi) {
      status = stream_memcpy(&u->stream, u->param_shard + (lo - u->owned_begin),
                             values + (lo - first), floats(hi - lo));
    }
  }
  if (status == ST_OK) status = stream_sync(&u->stream);
  return status;
}

int unit_is_gathered(const unit *u) { return u->params != NULL && !u->gather_pending; }

st_status unit_gather_start(unit *u) {
  if (u->stage != 3 || u->params || u->gather_pending) return ST_OK;
  ST_CHECK(
      mem_alloc((void **)&u->params, floats(u->layout.numel), MEM_DEVICE, MEM_GATHERED, u->dev));
  st_status status = comm_all_gather(u->groups.shard, u->param_shard, u->params,
                                     (size_t)u->layout.shard_numel, ST_FP32, &u->gather_work);
  if (status != ST_OK) {
    mem_free(u->params);
    u->params = NULL;
    return status;
  }
  u->gather_pending = 1;
  return ST_OK;
}

st_status unit_gather_wait(unit *u) {
  ST_CHECK(unit_gather_start(u));
  if (!u->gather_pending) return ST_OK;
  u->gather_pending = 0;
  return comm_wait(&u->gather_work);
}

void unit_release(unit *u) {
  if (u->stage != 3 || u->gather_pending) return;
  mem_free(u->params);
  u->params = NULL;
}

st_status unit_grads_ensure(unit *u) {
  if (u->grads) return ST_OK;
  return alloc_zeroed(&u->grads, u->layout.numel, MEM_GATHERED, u);
}

st_status unit_grads_zero(unit *u) {
  if (!u->grads) return ST_OK;
  ST_CHECK(stream_memset(&u->stream, u->grads, 0, floats(u->layout.numel)));
  return stream_sync(&u->stream);
}

st_status unit_reduce_start(unit *u) {
  if (!u->grads) {
    return st_error(ST_ERR_INTERNAL, "unit %s: reduce without gradients", u->name);
  }
  if (!u->groups.shard) return ST_OK; /* one rank, stage 0: the gradients are complete */
  ST_CHECK(comm_reduce_scatter(u->groups.shard, u->grads, u->grad_shard,
                               (size_t)u->layout.shard_numel, ST_FP32, COMM_SUM, &u->reduce_work));
  u->reduce_pending = 1;
  return ST_OK;
}

st_status unit_reduce_wait(unit *u) {
  if (!u->reduce_pending) return ST_OK;
  u->reduce_pending = 0;
  ST_CHECK(comm_wait(&u->reduce_work));
  const size_t shard = (size_t)u->layout.shard_numel;
  if (u->groups.replicate && comm_size(u->groups.replicate) > 1) {
    ST_CHECK(comm_all_reduce(u->groups.replicate, u->grad_shard, u->grad_shard, shard, ST_FP32,
                             COMM_SUM, NULL));
  }
  if (u->stage == 0 && shards_of(u) > 1) {
    ST_CHECK(comm_all_gather(u->groups.shard, u->grad_shard, u->grads, shard, ST_FP32, NULL));
  }
  if (u->stage >= 2) {
    mem_free(u->grads);
    u->grads = NULL;
  }
  return ST_OK;
}

float *unit_owned_grads(const unit *u) { return u->stage == 0 ? u->grads : u->grad_shard; }

st_status unit_optimizer_reset(unit *u) {
  ST_CHECK(stream_memcpy(&u->stream, u->master, u->param_shard, floats(u->owned_numel)));
  ST_CHECK(stream_memset(&u->stream, u->adam_m, 0, floats(u->owned_numel)));
  ST_CHECK(stream_memset(&u->stream, u->adam_v, 0, floats(u->owned_numel)));
  return stream_sync(&u->stream);
}

st_status unit_publish(unit *u) {
  ST_CHECK(stream_memcpy(&u->stream, u->param_shard, u->master, floats(u->owned_numel)));
  ST_CHECK(stream_sync(&u->stream));
  if ((u->stage == 1 || u->stage == 2) && shards_of(u) > 1) {
    ST_CHECK(comm_all_gather(u->groups.shard, u->param_shard, u->params,
                             (size_t)u->layout.shard_numel, ST_FP32, NULL));
  }
  return ST_OK;
}

static st_tensor view(const unit *u, float *base, int index) {
  const unit_param *p = &u->layout.params[index];
  st_tensor t;
  tensor_make(&t, base ? base + p->offset : NULL, ST_FP32, u->dev->backend->kind, p->ndim,
              p->local_shape);
  return t;
}

st_tensor unit_param_tensor(const unit *u, int index) { return view(u, u->params, index); }

st_tensor unit_grad_tensor(const unit *u, int index) { return view(u, u->grads, index); }
