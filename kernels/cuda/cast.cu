// cast.cu - elementwise fp32 <-> bf16 conversion kernels.
//
// Launch shape: 256 threads per block, a grid-stride loop over n elements with the grid capped
// at 132 * 8 blocks (8 resident blocks per SM on an H100/H200), since the work is pure memory
// traffic and more blocks only add scheduling overhead. Each thread converts one element per
// iteration; the bit manipulation is the same as core/dtype.h's so results are identical.
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cast.h"

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 132 * 8;

__device__ uint16_t bf16_round(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__global__ void f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    dst[i] = bf16_round(src[i]);
  }
}

__global__ void bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
  }
}

unsigned blocks_for(size_t n) {
  size_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks ? blocks : 1);
}

st_status launched(const char *what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return st_error(ST_ERR_CUDA, "%s launch failed: %s", what, cudaGetErrorString(err));
  return ST_OK;
}

}  // namespace

extern "C" st_status cuda_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n,
                                           void *stream) {
  f32_to_bf16<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dst, src, n);
  return launched("f32_to_bf16");
}

extern "C" st_status cuda_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n,
                                           void *stream) {
  bf16_to_f32<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dst, src, n);
  return launched("bf16_to_f32");
}
