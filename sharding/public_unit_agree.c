/* public_unit_agree.c - st_unit_finalize's agreement over the mesh (public_unit.h). The unit's
 * collectives pair the ranks' flat buffers element by element, so every rank must declare the
 * same unit: a rank with another parameter, shape, split or dtype would exchange buffers of
 * another layout and get wrong values with no error, or an MPI error that names no cause. World
 * rank 0's declaration is broadcast, every rank compares its own with it, and the lowest rank
 * that differs tells every rank what differs. The allocation's outcome is agreed on next, so an
 * out-of-memory rank fails them all. The MPI calls run on the mesh's own duplicate of the world
 * (mesh_control), under the mesh's collective timeout: a rank that never calls st_unit_finalize
 * ends the job instead of holding it. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core/check_mpi.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mpi_agree.h"
#include "core/tensor.h"
#include "sharding/mesh.h"
#include "sharding/public_unit.h"

/* What st_unit_create and st_unit_add_param were given, without this rank's layout. */
typedef struct declared_unit {
  char name[ST_UNIT_NAME_MAX + 1];
  int zero_stage, param_dtype, reduce_dtype, count;
} declared_unit;

typedef struct declared_param {
  char name[UNIT_NAME_MAX];
  int ndim, split;
  int64_t shape[UNIT_MAX_DIMS];
} declared_param;

static declared_unit declared_unit_of(const st_unit *h) {
  declared_unit d;
  memset(&d, 0, sizeof d); /* padding and the names' tails compare too */
  snprintf(d.name, sizeof d.name, "%s", h->u.name);
  d.zero_stage = h->zero_stage;
  d.param_dtype = (int)h->u.precision.param;
  d.reduce_dtype = (int)h->u.precision.reduce;
  d.count = h->u.layout.count;
  return d;
}

static declared_param declared_param_of(const unit_param *p) {
  declared_param d;
  memset(&d, 0, sizeof d);
  snprintf(d.name, sizeof d.name, "%s", p->name);
  d.ndim = p->ndim;
  d.split = (int)p->split;
  memcpy(d.shape, p->shape, (size_t)p->ndim * sizeof *p->shape);
  return d;
}

static void describe_param(const declared_param *p, char *out, size_t size) {
  char shape[96];
  snprintf(out, size, "'%s' %s %s", p->name,
           tensor_shape_text(shape, sizeof shape, p->ndim, p->shape),
           tp_split_name((tp_split)p->split));
}

/* What differs between world rank 0's unit `first` and this rank's `here`, in `out`; 0 when
 * nothing does. */
static int unit_difference(const declared_unit *first, const declared_unit *here, char *out,
                           size_t size) {
  if (strcmp(first->name, here->name) != 0) {
    snprintf(out, size, "the unit is '%s' there, '%s' here", first->name, here->name);
  } else if (first->zero_stage != here->zero_stage) {
    snprintf(out, size, "ZeRO stage %d there, %d here", first->zero_stage, here->zero_stage);
  } else if (first->param_dtype != here->param_dtype || first->reduce_dtype != here->reduce_dtype) {
    snprintf(out, size, "param and reduce dtypes %s and %s there, %s and %s here",
             dtype_name((st_dtype)first->param_dtype), dtype_name((st_dtype)first->reduce_dtype),
             dtype_name((st_dtype)here->param_dtype), dtype_name((st_dtype)here->reduce_dtype));
  } else if (first->count != here->count) {
    snprintf(out, size, "%d parameter%s there, %d here", first->count, first->count == 1 ? "" : "s",
             here->count);
  } else {
    return 0;
  }
  return 1;
}

static st_status declared_differently(const st_unit *h, const char *caller, int world_rank,
                                      const char *difference) {
  return st_error(ST_ERR_INVALID_ARG,
                  "%s: unit '%s' is declared differently on world rank 0 (there) and world rank "
                  "%d (here), but every rank of the mesh must declare the same unit: %s",
                  caller, h->u.name, world_rank, difference);
}

/* This rank's unit (name, stage, dtypes, parameter count) against world rank 0's, broadcast. */
static st_status compare_unit(const st_unit *h, const char *caller, int world_rank) {
  const declared_unit here = declared_unit_of(h);
  declared_unit first = here;
  MPI_CHECK(MPI_Bcast(&first, (int)sizeof first, MPI_BYTE, 0, mesh_control(h->mesh)));
  char difference[512];
  if (!unit_difference(&first, &here, difference, sizeof difference)) return ST_OK;
  return declared_differently(h, caller, world_rank, difference);
}

/* This rank's parameters against world rank 0's, broadcast one by one: every rank holds as
 * many (compare_unit agreed), so every rank makes as many broadcasts. */
static st_status compare_params(const st_unit *h, const char *caller, int world_rank) {
  char difference[512];
  int differs = 0;
  for (int i = 0; i < h->u.layout.count; i++) {
    const declared_param here = declared_param_of(&h->u.layout.params[i]);
    declared_param first = here;
    MPI_CHECK(MPI_Bcast(&first, (int)sizeof first, MPI_BYTE, 0, mesh_control(h->mesh)));
    if (differs || memcmp(&first, &here, sizeof here) == 0) continue;
    char first_text[160], here_text[160];
    describe_param(&first, first_text, sizeof first_text);
    describe_param(&here, here_text, sizeof here_text);
    snprintf(difference, sizeof difference, "parameter %d is %s there, %s here", i, first_text,
             here_text);
    differs = 1;
  }
  return differs ? declared_differently(h, caller, world_rank, difference) : ST_OK;
}

/* Arms the mesh's collective deadline over `caller`'s agreement. */
static st_status arm(const st_unit *h, const char *caller, deadline *d) {
  char what[160];
  snprintf(what, sizeof what, "%s's agreement on unit '%s' over the mesh", caller, h->u.name);
  return deadline_arm(d, DEADLINE_COLLECTIVE, comm_timeout_s(mesh_comm(h->mesh, ST_GROUP_WORLD)),
                      what);
}

st_status unit_handle_agree_declaration(const st_unit *h, const char *caller) {
  if (!h->mesh) return ST_OK;
  int world_rank = 0;
  MPI_CHECK(MPI_Comm_rank(mesh_control(h->mesh), &world_rank));
  deadline d;
  ST_CHECK(arm(h, caller, &d));
  st_status status = mpi_agree_share(mesh_control(h->mesh), compare_unit(h, caller, world_rank));
  if (status == ST_OK) {
    status = mpi_agree_share(mesh_control(h->mesh), compare_params(h, caller, world_rank));
  }
  deadline_disarm(&d);
  return status;
}

st_status unit_handle_agree_outcome(const st_unit *h, st_status mine, const char *caller) {
  if (!h->mesh) return mine;
  deadline d;
  ST_CHECK(arm(h, caller, &d));
  char step[160];
  snprintf(step, sizeof step, "%s of unit '%s'", caller, h->u.name);
  const st_status status = mpi_agree_naming(mesh_control(h->mesh), mine, step);
  deadline_disarm(&d);
  return status;
}
