// elementwise.cu - the ops that touch each element once: GELU forward and backward, the residual
// add, casts between fp32 and bf16/fp16, in-place scaling and the finite check.
//
// Launch shape (all of them): 256 threads, a grid-stride loop, the grid capped at 132 x 16 blocks
// (pure memory traffic: more blocks only add scheduling). When every pointer is 16-byte aligned
// each thread step moves 8 elements with 16-byte loads and stores (kPack), and a scalar loop
// finishes the last n % 8; otherwise the scalar loop does everything. Arithmetic is fp32 and
// each output element is written by exactly one thread, so in-place use (out aliasing a or b)
// is safe and results do not depend on the launch shape.
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

extern "C" {
#include "core/check_cuda.h"
}

namespace {

constexpr int kThreads = 256;

// out[i] = f(a[i], b[i], out[i]) for the inputs the functor asks for (F::kA, kB, kOld).
template <stk::Dt D, class F>
__global__ void map_kernel(void *out, const void *a, const void *b, int64_t n, bool vec, F f) {
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t packs = vec ? n / stk::kPack : 0;
  for (int64_t p = tid; p < packs; p += stride) {
    float xa[stk::kPack] = {}, xb[stk::kPack] = {}, xo[stk::kPack] = {};
    if (F::kA) stk::load_pack<D>(xa, a, p * stk::kPack);
    if (F::kB) stk::load_pack<D>(xb, b, p * stk::kPack);
    if (F::kOld) stk::load_pack<D>(xo, out, p * stk::kPack);
#pragma unroll
    for (int e = 0; e < stk::kPack; e++) xo[e] = f(xa[e], xb[e], xo[e]);
    stk::store_pack<D>(out, p * stk::kPack, xo);
  }
  for (int64_t i = packs * stk::kPack + tid; i < n; i += stride) {
    const float xa = F::kA ? stk::load<D>(a, i) : 0.0f;
    const float xb = F::kB ? stk::load<D>(b, i) : 0.0f;
    const float xo = F::kOld ? stk::load<D>(out, i) : 0.0f;
    stk::store<D>(out, i, f(xa, xb, xo));
  }
}

struct GeluForward {
  static constexpr bool kA = true, kB = false, kOld = false;
  __device__ float operator()(float x, float, float) const { return stk::gelu(x); }
};

// dinp += dout * gelu'(inp): a = dout, b = inp.
struct GeluBackward {
  static constexpr bool kA = true, kB = true, kOld = true;
  __device__ float operator()(float dy, float x, float dx) const {
    return dx + dy * stk::gelu_grad(x);
  }
};

struct Add {
  static constexpr bool kA = true, kB = true, kOld = false;
  __device__ float operator()(float a, float b, float) const { return a + b; }
};

struct Scale {
  static constexpr bool kA = false, kB = false, kOld = true;
  float factor;
  __device__ float operator()(float, float, float x) const { return x * factor; }
};

template <class F>
st_status map(const char *op, st_dtype dtype, void *out, const void *a, const void *b, int64_t n,
              F f, const st_stream *stream) {
  const bool vec =
      stk::aligned16(out) && (!F::kA || stk::aligned16(a)) && (!F::kB || stk::aligned16(b));
  const unsigned grid = stk::grid_for(vec ? (n + stk::kPack - 1) / stk::kPack : n, kThreads);
  STK_DISPATCH_DT(dtype, (map_kernel<DT, F>
                          <<<grid, kThreads, 0, stk::stream_of(stream)>>>(out, a, b, n, vec, f)));
  return stk::launched(op, "map_kernel");
}

// dst[i] = src[i] converted from SRC to DST through fp32 (exact for the widening direction,
// core/dtype.h's rounding for the narrowing one).
template <stk::Dt SRC, stk::Dt DST>
__global__ void cast_kernel(void *dst, const void *src, int64_t n, bool vec) {
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t packs = vec ? n / stk::kPack : 0;
  for (int64_t p = tid; p < packs; p += stride) {
    float x[stk::kPack];
    stk::load_pack<SRC>(x, src, p * stk::kPack);
    stk::store_pack<DST>(dst, p * stk::kPack, x);
  }
  for (int64_t i = packs * stk::kPack + tid; i < n; i += stride) {
    stk::store<DST>(dst, i, stk::load<SRC>(src, i));
  }
}

// flag[0] = 1 when any of x[0, n) is inf or NaN. Each block ORs its threads' findings
// (__syncthreads_or) and one thread writes; every writer stores the same 1.0f, so the result
// does not depend on which block writes first.
template <stk::Dt D>
__global__ void finite_kernel(float *flag, const void *x, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int bad = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    bad |= !isfinite(stk::load<D>(x, i));
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1.0f;
}

}  // namespace

extern "C" st_status cuda_gelu_forward(void *ctx, const st_tensor *out, const st_tensor *inp,
                                       const st_stream *stream) {
  (void)ctx;
  return map("gelu_forward", inp->dtype, out->data, inp->data, NULL, tensor_numel(inp),
             GeluForward{}, stream);
}

extern "C" st_status cuda_gelu_backward(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                                        const st_tensor *inp, const st_stream *stream) {
  (void)ctx;
  return map("gelu_backward", inp->dtype, dinp->data, dout->data, inp->data, tensor_numel(inp),
             GeluBackward{}, stream);
}

extern "C" st_status cuda_residual_forward(void *ctx, const st_tensor *out, const st_tensor *a,
                                           const st_tensor *b, const st_stream *stream) {
  (void)ctx;
  return map("residual_forward", a->dtype, out->data, a->data, b->data, tensor_numel(a), Add{},
             stream);
}

extern "C" st_status cuda_scale(void *ctx, const st_tensor *x, float factor,
                                const st_stream *stream) {
  (void)ctx;
  return map("scale", x->dtype, x->data, NULL, NULL, tensor_numel(x), Scale{factor}, stream);
}

extern "C" st_status cuda_cast(void *ctx, const st_tensor *dst, const st_tensor *src,
                               const st_stream *stream) {
  (void)ctx;
  const int64_t n = tensor_numel(src);
  const cudaStream_t s = stk::stream_of(stream);
  if (dst->dtype == src->dtype) {
    CUDA_CHECK(
        cudaMemcpyAsync(dst->data, src->data, tensor_nbytes(src), cudaMemcpyDeviceToDevice, s));
    return ST_OK;
  }
  const bool vec = stk::aligned16(dst->data) && stk::aligned16(src->data);
  const unsigned grid = stk::grid_for(vec ? (n + stk::kPack - 1) / stk::kPack : n, kThreads);
  if (src->dtype == ST_FP32) {
    STK_DISPATCH_DT(dst->dtype, (cast_kernel<stk::Dt::F32, DT>
                                 <<<grid, kThreads, 0, s>>>(dst->data, src->data, n, vec)));
  } else {
    STK_DISPATCH_DT(src->dtype, (cast_kernel<DT, stk::Dt::F32>
                                 <<<grid, kThreads, 0, s>>>(dst->data, src->data, n, vec)));
  }
  return stk::launched("cast", "cast_kernel");
}

extern "C" st_status cuda_finite_check(void *ctx, const st_tensor *flag, const st_tensor *x,
                                       const st_stream *stream) {
  (void)ctx;
  const int64_t n = tensor_numel(x);
  STK_DISPATCH_DT(x->dtype, (finite_kernel<DT>
                             <<<stk::grid_for(n, kThreads), kThreads, 0, stk::stream_of(stream)>>>(
                                 static_cast<float *>(flag->data), x->data, n)));
  return stk::launched("finite_check", "finite_kernel");
}
