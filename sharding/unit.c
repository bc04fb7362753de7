/* unit.c - declaring a unit's parameters and owning its buffers. */
#include "sharding/unit.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

st_status unit_init(unit *u, const char *name, const st_device *dev, int S, int s, int T, int t) {
  memset(u, 0, sizeof *u);
  snprintf(u->name, sizeof u->name, "%s", name);
  u->dev = dev;
  u->shard_rank = s;
  if (s < 0 || s >= S) return st_error(ST_ERR_INVALID_ARG, "unit %s: shard %d of %d", name, s, S);
  return unit_layout_init(&u->layout, S, T, t);
}

st_status unit_declare(unit *u, const char *name, int ndim, const int64_t *shape, tp_split split,
                       int blocks, int *index) {
  if (u->params) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: parameter %s declared after allocation",
                    u->name, name);
  }
  ST_CHECK(unit_layout_add(&u->layout, name, ndim, shape, split, blocks));
  if (index) *index = u->layout.count - 1;
  return ST_OK;
}

st_status unit_allocate(unit *u) {
  size_t full = (size_t)u->layout.numel * sizeof(float);
  size_t shard = (size_t)u->layout.shard_numel * sizeof(float);
  st_status status;
  ST_CHECK_GOTO(mem_alloc((void **)&u->params, full, MEM_DEVICE, MEM_PARAMS, u->dev), status, fail);
  ST_CHECK_GOTO(mem_alloc((void **)&u->grads, full, MEM_DEVICE, MEM_GRADS, u->dev), status, fail);
  ST_CHECK_GOTO(mem_alloc((void **)&u->master, shard, MEM_DEVICE, MEM_OPTIMIZER, u->dev), status,
                fail);
  ST_CHECK_GOTO(mem_alloc((void **)&u->adam_m, shard, MEM_DEVICE, MEM_OPTIMIZER, u->dev), status,
                fail);
  ST_CHECK_GOTO(mem_alloc((void **)&u->adam_v, shard, MEM_DEVICE, MEM_OPTIMIZER, u->dev), status,
                fail);
  /* Padding between parameters must read as zero: it takes part in norms and reductions. */
  memset(u->params, 0, full);
  memset(u->grads, 0, full);
  memset(u->adam_m, 0, shard);
  memset(u->adam_v, 0, shard);
  return ST_OK;
fail:
  unit_free(u);
  return status;
}

void unit_free(unit *u) {
  mem_free(u->adam_v);
  mem_free(u->adam_m);
  mem_free(u->master);
  mem_free(u->grads);
  mem_free(u->params);
  u->adam_v = u->adam_m = u->master = u->grads = u->params = NULL;
  unit_layout_free(&u->layout);
}

static st_tensor view(const unit *u, float *base, int index) {
  const unit_param *p = &u->layout.params[index];
  st_tensor t;
  tensor_make(&t, base + p->offset, ST_FP32, u->dev->backend->kind, p->ndim, p->local_shape);
  return t;
}

st_tensor unit_param_tensor(const unit *u, int index) { return view(u, u->params, index); }

st_tensor unit_grad_tensor(const unit *u, int index) { return view(u, u->grads, index); }

int64_t unit_shard_begin(const unit *u) { return (int64_t)u->shard_rank * u->layout.shard_numel; }
