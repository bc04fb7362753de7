// reduce.cu - sums of a whole buffer into a device scalar: the sum of squares behind the global
// gradient norm and the sum of the step's per-token losses. out[0] += the sum; the host reads it
// only when it chooses to synchronise.
//
// Deterministic, in an order fixed by n alone:
//  1. reduce_partial, kBlocks (a constant, never the SM count) blocks of 256 threads: block b
//     owns the contiguous slice [b n / kBlocks, (b + 1) n / kBlocks); its threads stride the
//     slice (coalesced), each accumulating in double, then block_sum's fixed tree; the block's
//     total goes to partials[b] in the context's reduction region.
//  2. reduce_finish, one block of kBlocks threads: block_sum over the partials in the same fixed
//     tree, then out[0] += (float)total, one rounding.
// Double accumulation keeps the result within one fp32 rounding of the exact sum for any length
// the engine meets (the CPU backend sums in double too).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kBlocks = 512;
constexpr int kThreads = 256;
static_assert(kBlocks <= CUDA_REDUCE_PARTIALS, "partials must fit the context's region");

template <stk::Dt D, bool SQUARE>
__global__ void reduce_partial(double *partials, const void *x, int64_t n) {
  __shared__ double scratch[32];
  const int64_t begin = n * blockIdx.x / kBlocks, end = n * (blockIdx.x + 1) / kBlocks;
  double sum = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double v = stk::load<D>(x, i);
    sum += SQUARE ? v * v : v;
  }
  sum = stk::block_sum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kBlocks) reduce_finish(float *out, const double *partials) {
  __shared__ double scratch[32];
  const double total = stk::block_sum(partials[threadIdx.x], scratch);
  if (threadIdx.x == 0) *out += (float)total;
}

template <bool SQUARE>
st_status reduce(void *ctx, const char *op, const st_tensor *out, const st_tensor *x,
                 const st_stream *stream) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  const cudaStream_t s = stk::stream_of(stream);
  STK_DISPATCH_DT(x->dtype, (reduce_partial<DT, SQUARE><<<kBlocks, kThreads, 0, s>>>(
                                cx->reduce_partials, x->data, tensor_numel(x))));
  ST_CHECK(stk::launched(op, "reduce_partial"));
  reduce_finish<<<1, kBlocks, 0, s>>>(static_cast<float *>(out->data), cx->reduce_partials);
  return stk::launched(op, "reduce_finish");
}

}  // namespace

extern "C" st_status cuda_sum_squares(void *ctx, const st_tensor *out, const st_tensor *x,
                                      const st_stream *stream) {
  return reduce<true>(ctx, "sum_squares", out, x, stream);
}

extern "C" st_status cuda_sum(void *ctx, const st_tensor *out, const st_tensor *x,
                              const st_stream *stream) {
  return reduce<false>(ctx, "sum", out, x, stream);
}
