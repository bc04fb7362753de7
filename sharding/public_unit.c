/* public_unit.c - the public st_unit calls of shardtrain.h over the internal unit (unit.h):
 * arguments and call order checked (unit_handle_check), then the unit's own functions. The
 * gradient norm and the AdamW step are optim's (optim/public_optim.c). The caller's code reads
 * and writes the buffers from the host, so every call that gives the unit's streams work also
 * waits for it (unit_host_wait): a handle never has communication in flight. */
#include "sharding/public_unit.h"

#include <stddef.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config.h"
#include "core/error.h"
#include "sharding/comm_mpi.h"
#include "sharding/mesh.h"

_Static_assert(ST_TP_REPLICATED == (int)TP_REPLICATED && ST_TP_COLUMN == (int)TP_COLUMN &&
                   ST_TP_ROW == (int)TP_ROW,
               "st_tp_split converts to tp_split by value");

static st_status refuse(const st_unit *h, const char *caller, const char *why) {
  return st_error(ST_ERR_INVALID_ARG, "%s: unit '%s' %s", caller, h->u.name, why);
}

st_status unit_handle_check(const st_unit *h, const char *caller, unsigned needs) {
  if (!h) return st_error(ST_ERR_INVALID_ARG, "%s: the unit is NULL", caller);
  if (h->phase == UNIT_BROKEN) {
    return refuse(h, caller, "failed to finalize; only st_unit_destroy remains");
  }
  if (h->mesh && comm_mpi_finalized()) {
    return refuse(h, caller,
                  "is on a mesh and MPI is finalized (st_finalize, or the program's "
                  "MPI_Finalize); only st_unit_destroy remains");
  }
  if ((needs & UNIT_NEEDS_DECLARING) && h->phase != UNIT_DECLARING) {
    return refuse(h, caller, "is finalized; declare every parameter before st_unit_finalize");
  }
  if ((needs & UNIT_NEEDS_FINALIZED) && h->phase != UNIT_FINALIZED) {
    return refuse(h, caller, "is not finalized; call st_unit_finalize first");
  }
  if ((needs & UNIT_NEEDS_GATHERED) && !h->gathered) {
    return refuse(h, caller, "is released; call st_unit_gather first");
  }
  if ((needs & UNIT_NEEDS_RELEASED) && h->gathered) {
    return refuse(h, caller, "is gathered; call st_unit_release first");
  }
  if ((needs & UNIT_NEEDS_BACKWARD) && h->grads != UNIT_GRADS_BACKWARD) {
    return refuse(h, caller,
                  "has no backward in progress; this call belongs between "
                  "st_unit_begin_backward and st_unit_reduce_grads");
  }
  if ((needs & UNIT_NEEDS_NOT_REDUCED) && h->grads == UNIT_GRADS_REDUCED) {
    return refuse(h, caller, "has reduced gradients; call st_unit_zero_grads to start a step");
  }
  if ((needs & UNIT_NEEDS_REDUCED) && h->grads != UNIT_GRADS_REDUCED) {
    return refuse(h, caller, "has no reduced gradients; call st_unit_reduce_grads first");
  }
  if ((needs & UNIT_NEEDS_NOT_RESTORING) && h->optimizer == UNIT_OPTIMIZER_RESTORING) {
    return refuse(h, caller,
                  "has optimizer state written but not published; call st_unit_publish_state "
                  "first");
  }
  if ((needs & UNIT_NEEDS_STATE_SET) && h->optimizer == UNIT_OPTIMIZER_STALE) {
    return refuse(h, caller,
                  "has no optimizer state for its parameters (none reset or written since they "
                  "were set); call st_unit_write_state or st_unit_optimizer_reset first");
  }
  if ((needs & UNIT_NEEDS_GRADS_ZERO) && h->grads != UNIT_GRADS_ZERO) {
    return refuse(h, caller, "has gradients of a step in progress; call st_unit_zero_grads first");
  }
  /* The program may have made another GPU current for work of its own since the last call. */
  const st_status bound = h->u.dev ? device_bind(h->u.dev) : ST_OK;
  if (bound == ST_OK) return ST_OK;
  return st_error(bound, "%s: unit '%s': cannot make its GPU current: %s", caller, h->u.name,
                  st_last_error());
}

st_status unit_handle_check_index(const st_unit *h, const char *caller, int index) {
  if (index < 0 || index >= h->u.layout.count) {
    return st_error(ST_ERR_INVALID_ARG, "%s: unit '%s' has %d parameters; there is no index %d",
                    caller, h->u.name, h->u.layout.count, index);
  }
  return ST_OK;
}

st_status unit_handle_check_pointer(const void *p, const char *caller, const char *what) {
  if (!p) return st_error(ST_ERR_INVALID_ARG, "%s: %s is NULL", caller, what);
  return ST_OK;
}

/* The unit, then the kernel backend of its device, which the unit borrows. */
static st_status init_unit(st_unit *h, const st_mesh *mesh, const char *name,
                           const st_unit_config *cfg) {
  const unit_precision precision = {cfg->param_dtype, cfg->reduce_dtype};
  if (!mesh) {
    h->cpu = device_cpu();
    ST_CHECK(unit_init(&h->u, name, &h->cpu, cfg->zero_stage, &precision, NULL, 1, 0));
  } else {
    st_mesh_coords c;
    ST_CHECK(st_mesh_get_coords(mesh, &c));
    const unit_groups groups = {mesh_comm(mesh, ST_GROUP_SHARD),
                                mesh_comm(mesh, ST_GROUP_REPLICATE)};
    ST_CHECK(
        unit_init(&h->u, name, mesh_device(mesh), cfg->zero_stage, &precision, &groups, c.T, c.t));
  }
  ST_CHECK(kernel_backend_create(h->u.dev, &h->kb));
  unit_use_kernels(&h->u, h->kb);
  return ST_OK;
}

/* A buffer the caller reads and writes through the _data calls: the handle state they need,
 * and its descriptor of one parameter. */
typedef struct buffer_access {
  unsigned needs;
  st_tensor (*describe)(const unit *, int);
} buffer_access;

static const buffer_access params = {UNIT_NEEDS_FINALIZED | UNIT_NEEDS_GATHERED, unit_param_tensor};
static const buffer_access grads = {UNIT_NEEDS_FINALIZED | UNIT_NEEDS_BACKWARD, unit_grad_tensor};

/* The data and dtype of parameter `index`'s descriptor: the buffer in the dtype the device's
 * kernels compute in, or its fp32 compute copy. */
static st_status describe_data(const st_unit *h, const char *caller, int index, void **data,
                               st_dtype *dtype, st_tensor (*describe)(const unit *, int)) {
  ST_CHECK(unit_handle_check_index(h, caller, index));
  ST_CHECK(unit_handle_check_pointer(data, caller, "data"));
  ST_CHECK(unit_handle_check_pointer(dtype, caller, "dtype"));
  const st_tensor t = describe(&h->u, index);
  if (t.ndim == 0) { /* the descriptor could not be made (unit.c's view); st_last_error says why */
    return st_error(ST_ERR_INTERNAL, "%s: unit '%s': %s", caller, h->u.name, st_last_error());
  }
  *data = t.data;
  *dtype = t.dtype;
  return ST_OK;
}

/* The _data_typed calls: the handle's state, then describe_data. */
static st_status typed_data(const st_unit *h, const char *caller, const buffer_access *buffer,
                            int index, void **data, st_dtype *dtype) {
  ST_CHECK(unit_handle_check(h, caller, buffer->needs));
  return describe_data(h, caller, index, data, dtype, buffer->describe);
}

/* The _data calls, for a caller that computes in fp32 only: a device whose kernels compute in
 * the low-precision dtype itself has no fp32 copy to hand out (the _typed calls give its
 * data). */
static st_status fp32_data(const st_unit *h, const char *caller, const buffer_access *buffer,
                           int index, float **data) {
  ST_CHECK(unit_handle_check(h, caller, buffer->needs));
  ST_CHECK(unit_handle_check_pointer(data, caller, "data"));
  void *typed = NULL;
  st_dtype dtype = ST_FP32;
  ST_CHECK(describe_data(h, caller, index, &typed, &dtype, buffer->describe));
  if (dtype != ST_FP32) {
    return st_error(ST_ERR_UNSUPPORTED,
                    "%s: unit '%s' holds %s data on the %s device, not fp32 (the _typed call "
                    "gives it)",
                    caller, h->u.name, dtype_name(dtype), h->u.dev->backend->name);
  }
  *data = typed;
  return ST_OK;
}

st_status st_unit_create(st_unit **out, const st_mesh *mesh, const char *name,
                         const st_unit_config *config) {
  ST_CHECK(unit_handle_check_pointer(out, __func__, "out"));
  *out = NULL;
  ST_CHECK(unit_handle_check_pointer(name, __func__, "name"));
  if (strlen(name) > ST_UNIT_NAME_MAX) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: name '%.20s...' has %zu characters, more than the limit of %d "
                    "(ST_UNIT_NAME_MAX)",
                    __func__, name, strlen(name), ST_UNIT_NAME_MAX);
  }
  st_unit_config cfg;
  const st_unit_config defaults = ST_UNIT_CONFIG_INIT;
  ST_CHECK(config_read(&cfg, &defaults, sizeof cfg, config,
                       offsetof(st_unit_config, zero_stage) + sizeof(int), "st_unit_config"));
  if (mesh && comm_mpi_finalized()) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: unit '%s': MPI is finalized (st_finalize, or the program's "
                    "MPI_Finalize), so a unit on a mesh cannot communicate",
                    __func__, name);
  }
  if (mesh) ST_CHECK(device_bind(mesh_device(mesh)));
  st_unit *h = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&h, sizeof *h, MEM_HOST, MEM_WORKSPACE, NULL));
  h->zero_stage = cfg.zero_stage;
  st_status status = init_unit(h, mesh, name, &cfg);
  if (status != ST_OK) {
    status = st_error(status, "%s: %s", __func__, st_last_error());
    st_unit_destroy(h);
    return status;
  }
  if (mesh) {
    h->mesh = mesh;
    mesh_hold(mesh);
  }
  *out = h;
  return ST_OK;
}

void st_unit_destroy(st_unit *unit) {
  if (!unit) return;
  /* Its GPU current while its streams and buffers are freed; should that fail, so does
   * nothing that follows but the freeing itself, which CUDA does on any device. */
  if (unit->u.dev) (void)device_bind(unit->u.dev);
  mem_free(unit->scalar);
  unit_free(&unit->u);
  kernel_backend_destroy(unit->kb);
  if (unit->mesh) mesh_unhold(unit->mesh); /* after the unit let go of its communicators */
  mem_free(unit);
}

st_status st_unit_add_param(st_unit *unit, const char *name, int ndim, const int64_t *shape,
                            st_tp_split split, int *index) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_DECLARING));
  ST_CHECK(unit_handle_check_pointer(name, __func__, "name"));
  ST_CHECK(unit_handle_check_pointer(shape, __func__, "shape"));
  /* unit_layout_add refuses a split that is none of the three. */
  const st_status status = unit_declare(&unit->u, name, ndim, shape, (tp_split)split, 1, index);
  if (status == ST_OK) return ST_OK;
  return st_error(status, "%s: unit '%s': %s", __func__, unit->u.name, st_last_error());
}

/* Collective over the mesh: the ranks first agree that they declared the same unit (nothing is
 * allocated otherwise, and the unit may still be declared further), then on the allocation. */
st_status st_unit_finalize(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_DECLARING));
  ST_CHECK(unit_handle_agree_declaration(unit, __func__));
  if (unit->u.layout.count == 0) { /* on every rank, as they agreed */
    return refuse(unit, __func__, "has no parameters; declare them with st_unit_add_param");
  }
  st_status status = unit_allocate(&unit->u);
  if (status == ST_OK) {
    status = mem_alloc((void **)&unit->scalar, sizeof *unit->scalar, MEM_DEVICE, MEM_WORKSPACE,
                       unit->u.dev);
  }
  if (status != ST_OK) {
    status = st_error(status, "%s: unit '%s': %s", __func__, unit->u.name, st_last_error());
  }
  status = unit_handle_agree_outcome(unit, status, __func__);
  if (status != ST_OK) { /* the unit is freed already where its allocation failed */
    mem_free(unit->scalar);
    unit->scalar = NULL;
    unit_free(&unit->u);
  }
  unit->phase = status == ST_OK ? UNIT_FINALIZED : UNIT_BROKEN;
  return status;
}

st_status st_unit_param_numel(const st_unit *unit, int index, int64_t *numel) {
  ST_CHECK(unit_handle_check(unit, __func__, 0));
  ST_CHECK(unit_handle_check_index(unit, __func__, index));
  ST_CHECK(unit_handle_check_pointer(numel, __func__, "numel"));
  *numel = unit->u.layout.params[index].numel;
  return ST_OK;
}

st_status st_unit_set_param(st_unit *unit, int index, const float *values) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_NOT_RESTORING));
  ST_CHECK(unit_handle_check_index(unit, __func__, index));
  ST_CHECK(unit_handle_check_pointer(values, __func__, "values"));
  const unit_param *p = &unit->u.layout.params[index];
  ST_CHECK(unit_set_params(&unit->u, p->offset, values, p->numel));
  unit->optimizer = UNIT_OPTIMIZER_STALE;
  return ST_OK;
}

st_status st_unit_gather(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_NOT_RESTORING));
  ST_CHECK(unit_gather_wait(&unit->u));
  ST_CHECK(unit_host_wait(&unit->u));
  unit->gathered = 1;
  return ST_OK;
}

st_status st_unit_release(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED));
  unit_release(&unit->u);
  unit->gathered = 0;
  return ST_OK;
}

st_status st_unit_param_data(st_unit *unit, int index, float **data) {
  return fp32_data(unit, __func__, &params, index, data);
}

st_status st_unit_param_data_typed(st_unit *unit, int index, void **data, st_dtype *dtype) {
  return typed_data(unit, __func__, &params, index, data, dtype);
}

st_status st_unit_zero_grads(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED));
  ST_CHECK(unit_grads_zero(&unit->u));
  ST_CHECK(unit_host_wait(&unit->u));
  unit->grads = UNIT_GRADS_ZERO;
  return ST_OK;
}

st_status st_unit_begin_backward(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_NOT_REDUCED));
  ST_CHECK(unit_grads_begin(&unit->u));
  ST_CHECK(unit_host_wait(&unit->u));
  unit->grads = UNIT_GRADS_BACKWARD;
  return ST_OK;
}

st_status st_unit_grad_data(st_unit *unit, int index, float **data) {
  return fp32_data(unit, __func__, &grads, index, data);
}

st_status st_unit_grad_data_typed(st_unit *unit, int index, void **data, st_dtype *dtype) {
  return typed_data(unit, __func__, &grads, index, data, dtype);
}

st_status st_unit_reduce_grads(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__,
                             UNIT_NEEDS_FINALIZED | UNIT_NEEDS_RELEASED | UNIT_NEEDS_BACKWARD));
  ST_CHECK(unit_reduce_start(&unit->u));
  ST_CHECK(unit_reduce_wait(&unit->u));
  ST_CHECK(unit_host_wait(&unit->u));
  unit->grads = UNIT_GRADS_REDUCED;
  return ST_OK;
}

st_status st_unit_optimizer_reset(st_unit *unit) {
  ST_CHECK(unit_handle_check(unit, __func__, UNIT_NEEDS_FINALIZED | UNIT_NEEDS_NOT_RESTORING));
  ST_CHECK(unit_optimizer_reset(&unit->u));
  unit->optimizer = UNIT_OPTIMIZER_READY;
  return ST_OK;
}
