/* check_mpi.h - converts MPI return codes into ST_ERR_MPI with the call and MPI's own text. */
#ifndef ST_CORE_CHECK_MPI_H
#define ST_CORE_CHECK_MPI_H

#include <mpi.h>

#include "core/error.h"

#define MPI_CHECK(expr)                                                                     \
  do {                                                                                      \
    int mpi_check_err_ = (expr);                                                            \
    if (mpi_check_err_ != MPI_SUCCESS) {                                                    \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                            \
      int mpi_check_len_ = 0;                                                               \
      MPI_Error_string(mpi_check_err_, mpi_check_msg_, &mpi_check_len_);                    \
      return st_error(ST_ERR_MPI, "%s failed: %s (%s:%d)", #expr, mpi_check_msg_, __FILE__, \
                      __LINE__);                                                            \
    }                                                                                       \
  } while (0)

#endif /* ST_CORE_CHECK_MPI_H */
