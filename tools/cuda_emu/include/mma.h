// mma.h (CUDA emulation) - the warp matrix functions (nvcuda::wmma) that shardtrain's kernels
// use: m16n16k16 tiles of __half or __nv_bfloat16 with float accumulators; fill_fragment,
// load_matrix_sync, mma_sync and store_matrix_sync.
//
// Emulation: a fragment holds the WHOLE tile, as floats, in every lane of the warp (the hardware
// spreads it over the lanes; shardtrain's code never touches fragment elements, so they have no
// public name here). A load makes each lane read the whole tile itself; mma_sync makes each lane
// compute D = A B + C on its own copy in float, summing over k in order (the 16-bit products are
// exact in float); a store is written by lane 0 alone, so a lane that reads the stored tile
// without a __syncwarp after the store can see stale values, as on the GPU. None of the calls
// synchronises the warp. A pointer that is not 256-bit aligned or an ldm that is not a multiple
// of 16 bytes (CUDA's requirements) aborts with a message.
//
// Not emulated: other shapes (m32n8k16, m8n32k16, ...), other element types (tf32, int8, __half
// accumulators, ...), the fragment's x[] / num_elements, the satf argument, C.
#ifndef CUDA_EMU_MMA_H
#define CUDA_EMU_MMA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

unsigned cuda_emu_lane();  // cuda_emu_device.h: this CUDA thread's lane in its warp

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// A tile's rows and columns for its use: A is m x k, B is k x n, the accumulator m x n.
template <typename Use, int M, int N, int K>
struct tile_shape {
  static_assert(std::is_same<Use, matrix_a>::value || std::is_same<Use, matrix_b>::value ||
                    std::is_same<Use, accumulator>::value,
                "wmma::fragment: Use must be matrix_a, matrix_b or accumulator");
  static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
  static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
};

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the CUDA emulation has only m16n16k16 fragments");
  static_assert(std::is_same<Use, accumulator>::value
                    ? std::is_same<T, float>::value && std::is_void<Layout>::value
                    : (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) &&
                          (std::is_same<Layout, row_major>::value ||
                           std::is_same<Layout, col_major>::value),
                "the CUDA emulation has fragments of matrix_a / matrix_b with __half or "
                "__nv_bfloat16 and row_major or col_major, and accumulators of float with no "
                "layout");

 public:
  using element_type = T;
  static constexpr int rows = tile_shape<Use, M, N, K>::rows;
  static constexpr int cols = tile_shape<Use, M, N, K>::cols;
  float cuda_emu_tile[rows][cols];  // the whole tile, element (i, j) at [i][j]
};

namespace emu {

inline float to_float(float x) { return x; }
inline float to_float(__half x) { return __half2float(x); }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// CUDA's requirements on a warp matrix load or store: the pointer 256-bit aligned, ldm a
// multiple of 16 bytes. Anything else is undefined on the GPU; here it aborts.
inline void check_access(const char *call, const void *ptr, unsigned ldm, size_t elem_bytes) {
  if ((uintptr_t)ptr % 32u != 0) {
    fprintf(stderr, "cuda_emu: wmma::%s: pointer %p is not 256-bit aligned\n", call, ptr);
    abort();
  }
  if (ldm * elem_bytes % 16u != 0) {
    fprintf(stderr, "cuda_emu: wmma::%s: ldm %u is not a multiple of 16 bytes\n", call, ldm);
    abort();
  }
}

}  // namespace emu

template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &a,
                          const typename fragment<Use, M, N, K, T, Layout>::element_type &v) {
  const float x = emu::to_float(v);
  for (int i = 0; i < a.rows; i++)
    for (int j = 0; j < a.cols; j++) a.cuda_emu_tile[i][j] = x;
}

// matrix_a / matrix_b: element (i, j) of a row-major tile at ptr[i * ldm + j], of a
// column-major one at ptr[j * ldm + i].
template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &a, const T *ptr, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value,
                "wmma::load_matrix_sync of an accumulator takes a layout_t");
  constexpr bool row = std::is_same<Layout, row_major>::value;
  emu::check_access("load_matrix_sync", ptr, ldm, sizeof(T));
  for (int i = 0; i < a.rows; i++)
    for (int j = 0; j < a.cols; j++)
      a.cuda_emu_tile[i][j] =
          emu::to_float(row ? ptr[(size_t)i * ldm + j] : ptr[(size_t)j * ldm + i]);
}

template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &a, const float *ptr,
                             unsigned ldm, layout_t layout) {
  const bool row = layout == mem_row_major;
  emu::check_access("load_matrix_sync", ptr, ldm, sizeof(float));
  for (int i = 0; i < a.rows; i++)
    for (int j = 0; j < a.cols; j++)
      a.cuda_emu_tile[i][j] = row ? ptr[(size_t)i * ldm + j] : ptr[(size_t)j * ldm + i];
}

// Written by lane 0 alone (see the top of the file).
template <int M, int N, int K>
inline void store_matrix_sync(float *ptr, const fragment<accumulator, M, N, K, float> &a,
                              unsigned ldm, layout_t layout) {
  const bool row = layout == mem_row_major;
  emu::check_access("store_matrix_sync", ptr, ldm, sizeof(float));
  if (cuda_emu_lane() != 0) return;
  for (int i = 0; i < a.rows; i++)
    for (int j = 0; j < a.cols; j++)
      (row ? ptr[(size_t)i * ldm + j] : ptr[(size_t)j * ldm + i]) = a.cuda_emu_tile[i][j];
}

// d = a b + c; d may be c.
template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                     const fragment<matrix_a, M, N, K, T, LayoutA> &a,
                     const fragment<matrix_b, M, N, K, T, LayoutB> &b,
                     const fragment<accumulator, M, N, K, float> &c) {
  float out[M][N];
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      float sum = 0.0f;
      for (int k = 0; k < K; k++) sum += a.cuda_emu_tile[i][k] * b.cuda_emu_tile[k][j];
      out[i][j] = sum + c.cuda_emu_tile[i][j];
    }
  }
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) d.cuda_emu_tile[i][j] = out[i][j];
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // CUDA_EMU_MMA_H
