/* comm_nccl_stub.c - stands in for the NCCL backend in builds without CUDA, so callers need
 * no #ifdef: the backend simply reports itself unavailable. */
#include "core/error.h"
#include "sharding/comm_nccl.h"

int comm_nccl_available(void) { return 0; }

st_status comm_nccl_create(comm **out, MPI_Comm mpi_comm, const char *group_name,
                           const st_device *dev, double timeout_s, int max_ctas) {
  (void)max_ctas;
  (void)mpi_comm;
  (void)group_name;
  (void)dev;
  (void)timeout_s;
  *out = NULL;
  return st_error(ST_ERR_UNSUPPORTED, "this build has no NCCL backend (built without CUDA)");
}
