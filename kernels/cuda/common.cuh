// common.cuh - device helpers every kernel file of the CUDA backend shares: element access for
// the three dtypes with core/dtype.h's exact rounding, 16-byte packed loads, warp and block
// reductions in a fixed order, launch-error reporting and the dtype dispatch.
//
// Inline by necessity: the backend is built without -rdc, so a __device__ helper must be visible
// in every translation unit that calls it. Nothing here holds state.
#ifndef ST_KERNELS_CUDA_COMMON_CUH
#define ST_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/error.h"
#include "kernels/backend_ops.h"
}

namespace stk {

// Element types as kernel template arguments. bf16 and fp16 travel as their raw 16 bits, so the
// conversions below are exactly core/dtype.h's (the toolkit's intrinsics quiet NaNs differently).
enum class Dt { F32, BF16, F16 };

template <Dt D>
struct Storage {
  using type = uint16_t;
};
template <>
struct Storage<Dt::F32> {
  using type = float;
};

__device__ __forceinline__ uint16_t bf16_from_float(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float float_from_bf16(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// IEEE half, rounded to nearest even: core/dtype.c's fp16_from_f32 step for step.
__device__ __forceinline__ uint16_t fp16_from_float(float f) {
  uint32_t u = __float_as_uint(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  float a = fabsf(f);
  if (isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) return static_cast<uint16_t>(sign | (uint16_t)rintf(a * 16777216.0f));
  uint32_t exp = ((u >> 23) & 0xffu) - 127u + 15u;
  uint32_t mant = u & 0x7fffffu;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;
  return static_cast<uint16_t>(sign | half);
}

// core/dtype.c's f32_from_fp16: every NaN becomes the positive quiet NaN 0x7fc00000.
__device__ __forceinline__ float float_from_fp16(uint16_t h) {
  float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0) return sign * ldexpf((float)mant, -24);
  if (exp == 31) return mant ? __uint_as_float(0x7fc00000u) : sign * __uint_as_float(0x7f800000u);
  return sign * ldexpf((float)(mant | 0x400), exp - 25);
}

template <Dt D>
__device__ __forceinline__ float to_float(typename Storage<D>::type x) {
  if constexpr (D == Dt::F32) {
    return x;
  } else if constexpr (D == Dt::BF16) {
    return float_from_bf16(x);
  } else {
    return float_from_fp16(x);
  }
}

template <Dt D>
__device__ __forceinline__ typename Storage<D>::type from_float(float x) {
  if constexpr (D == Dt::F32) {
    return x;
  } else if constexpr (D == Dt::BF16) {
    return bf16_from_float(x);
  } else {
    return fp16_from_float(x);
  }
}

template <Dt D>
__device__ __forceinline__ float load(const void *p, int64_t i) {
  return to_float<D>(static_cast<const typename Storage<D>::type *>(p)[i]);
}

template <Dt D>
__device__ __forceinline__ void store(void *p, int64_t i, float x) {
  static_cast<typename Storage<D>::type *>(p)[i] = from_float<D>(x);
}

// Elements handled per thread step by the elementwise kernels: 8, i.e. one 16-byte load of a
// 16-bit dtype or two of fp32.
constexpr int kPack = 8;

// Elements [i, i + kPack) of p as floats, with 16-byte loads; p + i must be 16-byte aligned.
// The loaded int4 becomes elements by memcpy (register moves once compiled): reading it through
// a pointer of the element type breaks C++'s aliasing rules, and g++ then drops the values
// (the CUDA emulation, tools/cuda_emu, read zeros).
template <Dt D>
__device__ __forceinline__ void load_pack(float (&out)[kPack], const void *p, int64_t i) {
  using T = typename Storage<D>::type;
  constexpr int kLoads = kPack * sizeof(T) / 16;
  const int4 *src = reinterpret_cast<const int4 *>(static_cast<const T *>(p) + i);
#pragma unroll
  for (int l = 0; l < kLoads; l++) {
    const int4 raw = src[l];
    T v[16 / sizeof(T)];
    memcpy(v, &raw, sizeof raw);
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(T); e++) out[l * (16 / sizeof(T)) + e] = to_float<D>(v[e]);
  }
}

template <Dt D>
__device__ __forceinline__ void store_pack(void *p, int64_t i, const float (&in)[kPack]) {
  using T = typename Storage<D>::type;
  constexpr int kLoads = kPack * sizeof(T) / 16;
  int4 *dst = reinterpret_cast<int4 *>(static_cast<T *>(p) + i);
#pragma unroll
  for (int l = 0; l < kLoads; l++) {
    T v[16 / sizeof(T)];
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(T); e++)
      v[e] = from_float<D>(in[l * (16 / sizeof(T)) + e]);
    int4 raw;
    memcpy(&raw, v, sizeof raw);
    dst[l] = raw;
  }
}

// Elements [c0, c0 + 8) of a row starting at element `base` as floats: one or two 16-byte loads
// when `vec` (the row length is a multiple of 8 and the buffers 16-byte aligned), else element by
// element with those past `cols` read as 0. Both paths give a thread the same elements, so a
// kernel that sums them adds the same values in the same order whichever path runs: its bits
// do not depend on where the buffers sit.
template <Dt D>
__device__ __forceinline__ void row_load(float (&v)[kPack], const void *p, int64_t base, int64_t c0,
                                         int64_t cols, bool vec) {
  if (vec) {
    load_pack<D>(v, p, base + c0);
    return;
  }
#pragma unroll
  for (int e = 0; e < kPack; e++) v[e] = c0 + e < cols ? load<D>(p, base + c0 + e) : 0.0f;
}

// Its store: elements past `cols` are not written.
template <Dt D>
__device__ __forceinline__ void row_store(void *p, int64_t base, int64_t c0, int64_t cols, bool vec,
                                          const float (&v)[kPack]) {
  if (vec) {
    store_pack<D>(p, base + c0, v);
    return;
  }
#pragma unroll
  for (int e = 0; e < kPack; e++) {
    if (c0 + e < cols) store<D>(p, base + c0 + e, v[e]);
  }
}

// Sum over the 32 lanes of a warp by a butterfly: every lane gets the same bits, and the order
// of the additions is fixed by the lane numbers alone.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024): warp sums, then the
// first warp sums the warp results in warp order. Every thread gets the result. `scratch` holds
// 32 values; the block must call this uniformly. Fixed order: deterministic.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T *scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  return warp_sum(total);
}

// GPT-2's tanh GELU and its derivative, in fp32, the formulas of kernels/cpu/gelu.c: 1 + tanh u
// and 1 - tanh u straight from e = exp(-2|u|), as 2 / (1 + e) and 2e / (1 + e) by the sign of
// u, without the cancellation of 1 + tanhf(u) in the negative tail. |u| is capped at 40, as on
// the CPU: exp(-80) is still a normal float, so 1 - tanh u never rounds to 0 and the derivative
// of a huge input is huge, not 0 x inf = NaN.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_u(float x) {
  return kGeluScale * (x + kGeluCubic * x * x * x);
}

__device__ __forceinline__ void tanh_parts(float u, float *plus, float *minus) {
  const float e = expf(-2.0f * fminf(fabsf(u), 40.0f));
  const float large = 2.0f / (1.0f + e), small = large * e;
  *plus = u >= 0.0f ? large : small;
  *minus = u >= 0.0f ? small : large;
}

__device__ __forceinline__ float gelu(float x) {
  float plus, minus;
  tanh_parts(gelu_u(x), &plus, &minus);
  return 0.5f * x * plus;
}

__device__ __forceinline__ float gelu_grad(float x) {
  float plus, minus;
  tanh_parts(gelu_u(x), &plus, &minus);
  float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * plus + 0.5f * x * (plus * minus) * du_dx;
}

// Blocks for a grid-stride loop over `work` items of `per_block` each, capped: memory-bound
// kernels gain nothing from more resident blocks than 132 SMs x 16.
inline unsigned grid_for(int64_t work, int64_t per_block, int64_t cap = 132 * 16) {
  int64_t blocks = (work + per_block - 1) / per_block;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks > 0 ? blocks : 1);
}

inline bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The launch's error, if any, as ST_ERR_CUDA naming the op and the kernel.
inline st_status launched(const char *op, const char *kernel) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return ST_OK;
  return st_error(ST_ERR_CUDA, "%s: launching %s failed: %s", op, kernel, cudaGetErrorString(err));
}

inline cudaStream_t stream_of(const st_stream *s) { return static_cast<cudaStream_t>(s->handle); }

}  // namespace stk

// Calls BODY with `constexpr stk::Dt DT` bound to the runtime st_dtype `dtype`.
#define STK_DISPATCH_DT(dtype, ...)           \
  do {                                        \
    switch (dtype) {                          \
      case ST_BF16: {                         \
        constexpr stk::Dt DT = stk::Dt::BF16; \
        __VA_ARGS__;                          \
      } break;                                \
      case ST_FP16: {                         \
        constexpr stk::Dt DT = stk::Dt::F16;  \
        __VA_ARGS__;                          \
      } break;                                \
      default: {                              \
        constexpr stk::Dt DT = stk::Dt::F32;  \
        __VA_ARGS__;                          \
      } break;                                \
    }                                         \
  } while (0)

// STK_DISPATCH_DT's BODY with a second `constexpr stk::Dt GT` bound to the dtype of the parameter
// gradients a backward writes: DT itself (`grad_dtype` == `dtype`), or fp32 beside 16-bit
// activations (kernels.h, kernel_supports_grad_dtype; the wrappers checked it is one of the two).
#define STK_DISPATCH_GRAD(dtype, grad_dtype, ...) \
  STK_DISPATCH_DT(dtype, {                        \
    if ((grad_dtype) == (dtype)) {                \
      constexpr stk::Dt GT = DT;                  \
      __VA_ARGS__;                                \
    } else {                                      \
      constexpr stk::Dt GT = stk::Dt::F32;        \
      __VA_ARGS__;                                \
    }                                             \
  })

#endif  // ST_KERNELS_CUDA_COMMON_CUH
