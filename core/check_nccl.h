/* check_nccl.h - converts NCCL results into ST_ERR_NCCL with the call and NCCL's own text.
 * Include only from files built with ST_HAVE_CUDA. */
#ifndef ST_CORE_CHECK_NCCL_H
#define ST_CORE_CHECK_NCCL_H

#include <nccl.h>

#include "core/error.h"

#define NCCL_CHECK(expr)                                                        \
  do {                                                                          \
    ncclResult_t nccl_check_err_ = (expr);                                      \
    if (nccl_check_err_ != ncclSuccess) {                                       \
      return st_error(ST_ERR_NCCL, "%s failed: %s (%s:%d)", #expr,              \
                      ncclGetErrorString(nccl_check_err_), __FILE__, __LINE__); \
    }                                                                           \
  } while (0)

#endif /* ST_CORE_CHECK_NCCL_H */
