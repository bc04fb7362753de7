/* after_mpi_finalize_test.c - a program that starts and finalizes MPI itself, with a mesh and a
 * stage-3 unit (their communicators used by a step) still live at its MPI_Finalize: the calls
 * that would communicate are refused, destroying frees the memory without calling MPI, and
 * st_finalize succeeds, with handles live or not. Every rank checks its own results; the world
 * cannot sum them after MPI_Finalize, so each rank exits non-zero on its own failures and
 * mpirun fails the run when any rank does. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "tests/testing.h"

static const int64_t kShape[1] = {8};

/* The call fails with ST_ERR_INVALID_ARG and st_last_error() contains `phrase`. */
#define CHECK_REFUSED(expr, phrase)                                                  \
  do {                                                                               \
    st_status refused_s_ = (expr);                                                   \
    CHECK_MSG(refused_s_ == ST_ERR_INVALID_ARG && strstr(st_last_error(), phrase),   \
              "%s -> %s: '%s' (expected '%s')", #expr, st_status_string(refused_s_), \
              st_last_error(), phrase);                                              \
  } while (0)

/* A stage-3 unit of one parameter that has been through one step's collectives. */
static st_unit *stepped_unit(const st_mesh *mesh) {
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.zero_stage = 3;
  st_unit *u = NULL;
  CHECK_OK(st_unit_create(&u, mesh, "layer", &config));
  if (!u) return NULL;
  const float values[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK_OK(st_unit_add_param(u, "w", 1, kShape, ST_TP_REPLICATED, NULL));
  CHECK_OK(st_unit_finalize(u));
  CHECK_OK(st_unit_set_param(u, 0, values));
  CHECK_OK(st_unit_optimizer_reset(u));
  CHECK_OK(st_unit_zero_grads(u));
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_begin_backward(u));
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_reduce_grads(u));
  return u;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv); /* the program's own MPI: st_init leaves it to the program */
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  CHECK_OK(st_init(&argc, &argv));
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  st_unit *u = mesh ? stepped_unit(mesh) : NULL;
  MPI_Finalize();

  CHECK_REFUSED(st_unit_gather(u), "MPI is finalized");
  CHECK_REFUSED(st_unit_zero_grads(u), "only st_unit_destroy remains");
  st_unit *late = (st_unit *)&late;
  CHECK_REFUSED(st_unit_create(&late, mesh, "late", NULL), "MPI is finalized");
  CHECK(late == NULL);
  st_mesh *again = (st_mesh *)&again;
  CHECK_REFUSED(st_mesh_create(&again, &cfg), "MPI is finalized");
  CHECK(again == NULL);
  CHECK_REFUSED(st_init(&argc, &argv),
                "MPI is already finalized (by st_finalize or the program's MPI_Finalize)");

  st_unit_destroy(u);
  CHECK_OK(st_finalize()); /* the mesh is still live: there is nothing left to finalize */
  st_mesh_destroy(mesh);
  CHECK_OK(st_finalize());
  uint64_t live = 1;
  CHECK_OK(st_memory_live_bytes(&live));
  CHECK_EQ_INT(live, 0);

  char name[64];
  snprintf(name, sizeof name, "after_mpi_finalize_test (rank %d)", me);
  return test_finish(name);
}
