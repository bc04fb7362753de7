/* public_unit.h - the library's side of the public st_unit handle (shardtrain.h): the unit
 * behind it and the state that fixes which calls are allowed next. sharding/public_unit.c
 * implements the handle's calls; public calls implemented in other modules (optim's gradient
 * norm and AdamW step) check the same state through unit_handle_check, so the order is
 * enforced in one place and reported in the same words. */
#ifndef ST_SHARDING_PUBLIC_UNIT_H
#define ST_SHARDING_PUBLIC_UNIT_H

#include "core/device.h"
#include "sharding/unit.h"
#include "shardtrain.h"

typedef enum unit_phase {
  UNIT_DECLARING = 0, /* st_unit_add_param allowed */
  UNIT_FINALIZED = 1, /* buffers allocated */
  UNIT_BROKEN = 2     /* st_unit_finalize failed and freed the unit: only destroy remains */
} unit_phase;

typedef enum unit_optimizer_phase {
  UNIT_OPTIMIZER_STALE = 0,    /* parameters set after the optimizer state (or never reset) */
  UNIT_OPTIMIZER_READY = 1,    /* st_unit_optimizer_reset or st_unit_publish_state since */
  UNIT_OPTIMIZER_RESTORING = 2 /* st_unit_write_state since, not yet published */
} unit_optimizer_phase;

typedef enum unit_grad_state {
  UNIT_GRADS_ZERO = 0,     /* after finalize or st_unit_zero_grads */
  UNIT_GRADS_BACKWARD = 1, /* between st_unit_begin_backward and st_unit_reduce_grads */
  UNIT_GRADS_REDUCED = 2   /* after st_unit_reduce_grads, until st_unit_zero_grads */
} unit_grad_state;

struct st_unit {
  unit u;
  st_device cpu;      /* the device of a unit created without a mesh (u.dev points here) */
  kernel_backend *kb; /* the unit's kernels (unit_use_kernels), owned by the handle */
  int zero_stage;     /* as created (the unit's policy holds it as data) */
  unit_phase phase;
  int gathered; /* between st_unit_gather and st_unit_release, at every stage */
  unit_grad_state grads;
  unit_optimizer_phase optimizer;
  /* The mesh whose communicators and device it uses, or NULL: the unit holds it (mesh_hold),
   * which counts the unit in mesh_live_handles (it holds MPI objects). */
  const st_mesh *mesh;
  /* One float of device memory, allocated with the unit (its allocation agreed on with the
   * rest): the scalar that the gradient norm and publish's shard-group count pass through, so
   * no call after st_unit_finalize allocates before a collective. */
  float *scalar;
};

/* What a call needs of the handle (bits of `needs` in unit_handle_check). */
enum {
  UNIT_NEEDS_DECLARING = 1 << 0,
  UNIT_NEEDS_FINALIZED = 1 << 1,
  UNIT_NEEDS_GATHERED = 1 << 2,
  UNIT_NEEDS_RELEASED = 1 << 3,
  UNIT_NEEDS_BACKWARD = 1 << 4,    /* gradients being accumulated */
  UNIT_NEEDS_NOT_REDUCED = 1 << 5, /* no reduce since the last st_unit_zero_grads */
  UNIT_NEEDS_REDUCED = 1 << 6,
  UNIT_NEEDS_NOT_RESTORING = 1 << 7, /* no optimizer state written and not yet published */
  UNIT_NEEDS_STATE_SET = 1 << 8,     /* optimizer state reset or written since set_param */
  UNIT_NEEDS_GRADS_ZERO = 1 << 9,    /* no gradients of a step in progress */
  /* the optimizer state ready (UNIT_OPTIMIZER_READY) */
  UNIT_NEEDS_OPTIMIZER = UNIT_NEEDS_STATE_SET | UNIT_NEEDS_NOT_RESTORING
};

/* ST_OK when `handle` is not NULL and its state meets every bit of `needs`, having made the
 * unit's GPU current (the program may have made another one current since); otherwise
 * ST_ERR_INVALID_ARG with a message that names `caller`, the unit and the call missing, or the
 * device's error naming `caller` and the unit. */
st_status unit_handle_check(const st_unit *handle, const char *caller, unsigned needs);

/* ST_OK when `index` names one of the handle's parameters / `p` is not NULL; otherwise
 * ST_ERR_INVALID_ARG naming `caller` and the parameter count / `what`. */
st_status unit_handle_check_index(const st_unit *handle, const char *caller, int index);
st_status unit_handle_check_pointer(const void *p, const char *caller, const char *what);

/* st_unit_finalize's agreement over the mesh, collective over its world (nothing without a
 * mesh), under the mesh's collective timeout (public_unit_agree.c): ST_OK on every rank when
 * every rank declared the same unit, else ST_ERR_INVALID_ARG on every rank naming the lowest
 * rank that differs from world rank 0 and what differs. */
st_status unit_handle_agree_declaration(const st_unit *handle, const char *caller);

/* Every rank's outcome of a step each took alone (`mine`), agreed on as mpi_agree_naming does:
 * ST_OK on every rank, or a failure on every rank (a rank that failed keeps its own error). */
st_status unit_handle_agree_outcome(const st_unit *handle, st_status mine, const char *caller);

#endif /* ST_SHARDING_PUBLIC_UNIT_H */
