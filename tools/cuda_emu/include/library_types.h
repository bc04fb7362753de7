/* library_types.h - cuda_emu's stand-in for the CUDA toolkit's library_types.h: the element
 * types the math libraries take (cudaDataType_t) and cuBLAS's compute types
 * (cublasComputeType_t, which the real toolkit declares in cublas_api.h). The enumerators have
 * the official names and values; only the real-valued types the project could name are here
 * (no complex, FP8 or 4-bit types). C and C++. */
#ifndef CUDA_EMU_LIBRARY_TYPES_H
#define CUDA_EMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_8U = 8,
  CUDA_R_32I = 10,
  CUDA_R_32U = 12,
  CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum cublasComputeType_t {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_16F_PEDANTIC = 65,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32I = 72,
  CUBLAS_COMPUTE_32I_PEDANTIC = 73
} cublasComputeType_t;

#endif /* CUDA_EMU_LIBRARY_TYPES_H */
