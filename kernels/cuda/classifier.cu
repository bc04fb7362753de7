// classifier.cu - the fused classifier: softmax cross-entropy over a padded vocabulary and its
// gradient, one pass per row, written in place of the logits when asked.
//
// Launch shape: one block of 512 threads per row (a row of 50k logits is 100-200 KB, enough
// work for a block; rows are independent). Three sweeps over the row's first `vocab` columns,
// threads striding by the block (coalesced): the row max (block_max), the sum of exp(x - max)
// (block_sum's fixed tree: deterministic), then, if dlogits is wanted, (softmax - onehot) *
// dloss_scale for v < vocab and 0 for the padding. The loss is log(sum) + max - x[target], with
// x[target] read by thread 0 before any thread can overwrite the row, so dlogits may alias
// logits (each element is read and then written by the same thread; the sweeps are separated
// by the reductions' barriers). A target outside [0, vocab) gives a NaN loss (a kernel cannot
// return an error without a host wait) and no onehot.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kThreads = 512;

__device__ float block_max(float v, float *scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = stk::warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return stk::warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads)
    classifier_kernel(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                      int64_t vocab, int64_t padded, float dloss_scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, base = row * padded;
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  float at_target = 0.0f;
  if (threadIdx.x == 0 && valid) at_target = stk::load<D>(logits, base + target);
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
    m = fmaxf(m, stk::load<D>(logits, base + v));
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
    s += expf(stk::load<D>(logits, base + v) - m);
  s = stk::block_sum(s, scratch);
  if (threadIdx.x == 0)
    losses[row] = valid ? logf(s) + m - at_target : __uint_as_float(0x7fc00000u);
  if (!dlogits) return;
  const float inv = 1.0f / s;
  for (int64_t v = threadIdx.x; v < padded; v += blockDim.x) {
    float g = 0.0f;
    if (v < vocab) {
      const float p = expf(stk::load<D>(logits, base + v) - m) * inv;
      g = (p - (v == target ? 1.0f : 0.0f)) * dloss_scale;
    }
    stk::store<D>(dlogits, base + v, g);
  }
}

}  // namespace

extern "C" st_status cuda_classifier(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                                     const st_tensor *logits, const int32_t *targets, int64_t vocab,
                                     float dloss_scale, const st_stream *stream) {
  (void)ctx;
  const int64_t rows = kernel_rows(logits), padded = kernel_cols(logits);
  STK_DISPATCH_DT(logits->dtype,
                  (classifier_kernel<DT><<<(unsigned)rows, kThreads, 0, stk::stream_of(stream)>>>(
                      static_cast<float *>(losses->data), dlogits ? dlogits->data : NULL,
                      logits->data, targets, vocab, padded, dloss_scale)));
  return stk::launched("classifier", "classifier_kernel");
}
