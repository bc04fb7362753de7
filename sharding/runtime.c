/* runtime.c - st_init / st_finalize: start MPI unless the embedding program already has, and
 * shut down only what we started. FUNNELED: only the thread that called st_init talks to MPI.
 * MPI starts once per process: st_init after st_finalize is refused, and st_finalize refuses
 * while meshes or units on a mesh are live (their destroy needs MPI), unless the program has
 * finalized MPI itself: then there is nothing to do, and destroying frees only memory. */
#include <mpi.h>

#include "core/check_mpi.h"
#include "core/deadline.h"
#include "core/error.h"
#include "core/log.h"
#include "sharding/comm_mpi.h"
#include "sharding/mesh.h"
#include "shardtrain.h"

static int we_started_mpi;

st_status st_init(int *argc, char ***argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (comm_mpi_finalized()) {
    /* MPI cannot be started twice in one process. */
    return st_error(ST_ERR_INVALID_ARG,
                    "st_init: MPI is already finalized (by st_finalize or the program's "
                    "MPI_Finalize), and cannot start again in this process");
  }
  if (!initialized) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    we_started_mpi = 1;
    /* MPI_COMM_WORLD keeps MPI's error handler: it is the program's. The library talks on
     * duplicates that return errors as codes (mesh_control and the groups split from it). */
  }
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size > 1) st_log_set_rank(rank);
  return ST_OK;
}

st_status st_finalize(void) {
  if (comm_mpi_finalized()) {
    /* The program finalized MPI itself: nothing is left to shut down, and handles still live
     * release only their memory when destroyed (comm_mpi_finalized). */
    we_started_mpi = 0;
    device_unbound_waits();
    deadline_watchdog_stop();
    return ST_OK;
  }
  const int live = mesh_live_handles();
  if (live > 0) {
    /* Their destroy frees MPI objects, which MPI forbids after MPI_Finalize. */
    return st_error(ST_ERR_INVALID_ARG,
                    "st_finalize: %d meshes or units on a mesh are still live; destroy them first",
                    live);
  }
  device_unbound_waits();
  deadline_watchdog_stop();
  if (!we_started_mpi) return ST_OK;
  MPI_CHECK(MPI_Finalize());
  we_started_mpi = 0;
  return ST_OK;
}
