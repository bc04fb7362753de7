/* check_cuda.h - converts CUDA runtime and cuBLAS return codes into st_status with a detail
 * naming the call and the foreign error. Include only from files built with ST_HAVE_CUDA. */
#ifndef ST_CORE_CHECK_CUDA_H
#define ST_CORE_CHECK_CUDA_H

#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(expr)                                                                         \
  do {                                                                                           \
    cudaError_t cuda_check_err_ = (expr);                                                        \
    if (cuda_check_err_ != cudaSuccess) {                                                        \
      st_error(ST_ERR_CUDA, "%s failed: %s (%s:%d)", #expr, cudaGetErrorString(cuda_check_err_), \
               __FILE__, __LINE__);                                                              \
      return ST_ERR_CUDA;                                                                        \
    }                                                                                            \
  } while (0)

/* cuBLAS status codes are plain ints here so this header does not need cublas headers. */
#define CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                       \
    int cublas_check_err_ = (int)(expr);                                                     \
    if (cublas_check_err_ != 0) {                                                            \
      st_error(ST_ERR_CUDA, "%s failed: cuBLAS status %d (%s:%d)", #expr, cublas_check_err_, \
               __FILE__, __LINE__);                                                          \
      return ST_ERR_CUDA;                                                                    \
    }                                                                                        \
  } while (0)

#endif /* ST_CORE_CHECK_CUDA_H */
