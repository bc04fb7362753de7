/* world_untouched_test.c - the library leaves the program's MPI_COMM_WORLD to the program, as an
 * embedding program needs (found by a review of the library embedded in a host program):
 * - no collective of the library runs on MPI_COMM_WORLD but the one duplicate st_mesh_create
 *   makes of it: a mesh's set-up, a unit's agreement, gathers, reductions and the optimizer's
 *   step talk on the library's own communicators, so a collective of the program's in flight on
 *   the world (from another thread, or not yet completed) never meets one of the library's. The
 *   library's MPI calls are counted through MPI's profiling interface: this file's MPI_Bcast and
 *   the others, which the linker takes over the MPI library's, count the calls made on the world
 *   and pass them to PMPI_Bcast and the others;
 * - st_init, which starts MPI here, leaves the world's error handler as MPI set it
 *   (MPI_ERRORS_ARE_FATAL): the program's choice, not the library's;
 * - a failed call's text stays st_last_error's through later calls that succeed, a mesh whose
 *   backend auto falls back to MPI among them.
 * Run on 1 and 4 ranks, checked on every rank. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "tests/testing_mpi.h"

/* The library's collectives on MPI_COMM_WORLD while `counting`, by name of the first one. */
static int counting, world_calls, world_dups;
static char first_call[64];

static void count(const char *call, MPI_Comm comm) {
  if (!counting || comm != MPI_COMM_WORLD) return;
  if (world_calls++ == 0) snprintf(first_call, sizeof first_call, "%s", call);
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *out) {
  if (counting && comm == MPI_COMM_WORLD) world_dups++;
  return PMPI_Comm_dup(comm, out);
}

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler handler) {
  count("MPI_Comm_set_errhandler", comm);
  return PMPI_Comm_set_errhandler(comm, handler);
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out) {
  count("MPI_Comm_split", comm);
  return PMPI_Comm_split(comm, color, key, out);
}

int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *out) {
  count("MPI_Comm_split_type", comm);
  return PMPI_Comm_split_type(comm, type, key, info, out);
}

int MPI_Bcast(void *buf, int n, MPI_Datatype type, int root, MPI_Comm comm) {
  count("MPI_Bcast", comm);
  return PMPI_Bcast(buf, n, type, root, comm);
}

int MPI_Allreduce(const void *in, void *out, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  count("MPI_Allreduce", comm);
  return PMPI_Allreduce(in, out, n, type, op, comm);
}

int MPI_Allgather(const void *in, int n, MPI_Datatype in_type, void *out, int m,
                  MPI_Datatype out_type, MPI_Comm comm) {
  count("MPI_Allgather", comm);
  return PMPI_Allgather(in, n, in_type, out, m, out_type, comm);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
  count("MPI_Ibarrier", comm);
  return PMPI_Ibarrier(comm, request);
}

int MPI_Ibcast(void *buf, int n, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request *request) {
  count("MPI_Ibcast", comm);
  return PMPI_Ibcast(buf, n, type, root, comm, request);
}

int MPI_Iallreduce(const void *in, void *out, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
  count("MPI_Iallreduce", comm);
  return PMPI_Iallreduce(in, out, n, type, op, comm, request);
}

int MPI_Iallgather(const void *in, int n, MPI_Datatype in_type, void *out, int m,
                   MPI_Datatype out_type, MPI_Comm comm, MPI_Request *request) {
  count("MPI_Iallgather", comm);
  return PMPI_Iallgather(in, n, in_type, out, m, out_type, comm, request);
}

int MPI_Ireduce_scatter_block(const void *in, void *out, int n, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm, MPI_Request *request) {
  count("MPI_Ireduce_scatter_block", comm);
  return PMPI_Ireduce_scatter_block(in, out, n, type, op, comm, request);
}

enum { N = 12 };

/* One unit through a whole step at `stage`. */
static void unit_step(const st_mesh *mesh, int stage) {
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.zero_stage = stage;
  st_unit *u = NULL;
  CHECK_OK(st_unit_create(&u, mesh, "layer", &config));
  if (!u) return;
  const int64_t shape[1] = {N};
  CHECK_OK(st_unit_add_param(u, "w", 1, shape, ST_TP_REPLICATED, NULL));
  CHECK_OK(st_unit_finalize(u));
  float values[N];
  for (int i = 0; i < N; i++) values[i] = 0.25f * (float)i;
  CHECK_OK(st_unit_set_param(u, 0, values));
  CHECK_OK(st_unit_optimizer_reset(u));
  CHECK_OK(st_unit_zero_grads(u));
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_begin_backward(u));
  float *grad = NULL;
  CHECK_OK(st_unit_grad_data(u, 0, &grad));
  if (grad) {
    for (int i = 0; i < N; i++) grad[i] = 1.0f;
  }
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_reduce_grads(u));
  double sumsq = 0;
  CHECK_OK(st_unit_grad_sumsq(u, &sumsq));
  CHECK_OK(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f));
  st_unit_destroy(u);
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  MPI_Errhandler handler;
  PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &handler);
  CHECK_MSG(handler == MPI_ERRORS_ARE_FATAL, "st_init changed the world's error handler");
  MPI_Errhandler_free(&handler);

  /* A failure the program was told of, then calls that succeed. */
  CHECK_STATUS(st_mesh_create(NULL, NULL), ST_ERR_INVALID_ARG);
  char failure[256];
  snprintf(failure, sizeof failure, "%s", st_last_error());

  counting = 1;
  st_mesh_config cfg = ST_MESH_CONFIG_INIT;
  cfg.device = "cpu"; /* auto backend: NCCL's check fails, MPI is taken */
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &cfg));
  if (mesh) {
    for (int stage = 0; stage <= 3; stage++) unit_step(mesh, stage);
  }
  st_mesh_destroy(mesh);
  counting = 0;
  CHECK_MSG(world_calls == 0, "%d collectives of the library on MPI_COMM_WORLD, the first %s",
            world_calls, first_call);
  CHECK_EQ_INT(world_dups, 1);
  CHECK_MSG(strcmp(st_last_error(), failure) == 0, "st_last_error '%s', was '%s'", st_last_error(),
            failure);

  const int failed = test_finish_mpi("world_untouched_test");
  CHECK_OK(st_finalize());
  return failed;
}
