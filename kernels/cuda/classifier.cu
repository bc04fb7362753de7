// classifier.cu - the fused classifier: softmax cross-entropy over a padded vocabulary and its
// gradient, two sweeps over each row, the gradient written in place of the logits when asked.
//
// Launch shape: one block of 512 threads per row (a row of 50k logits is 100-200 KB, enough
// work for a block; rows are independent), two blocks to an SM (at most 64 registers a thread).
// A row is read as packs of 8 columns; thread t owns packs t, t + 512, ... and takes kUnroll of
// them per loop step, their loads issued together: 32 KB of 16-bit loads in flight per SM,
// where one scalar load per thread and sweep left the earlier kernel far under the memory's
// bandwidth (16-byte loads when the padded row length is a multiple of 8 and the buffers are
// 16-byte aligned, else element by element: the same elements in the same order, so the bits
// do not depend on the path, as in layernorm.cu). Columns from `vocab` on take no part.
//  1. Online softmax: each thread keeps the running max of its columns and the sum of
//     exp(x - max), rescaled when the max grows; the block combines the threads' (max, sum)
//     pairs by a fixed butterfly (deterministic). loss = log(sum) + max - x[target], with
//     x[target] read by thread 0 before any thread can overwrite the row.
//  2. If dlogits is wanted: (softmax - onehot) * dloss_scale for v < vocab and 0 for the
//     padding. Each element is read and then written by the same thread, after the reduction's
//     barriers, so dlogits may alias logits.
// A target outside [0, vocab) gives a NaN loss (a kernel cannot return an error without a host
// wait) and no onehot.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kThreads = 512;
constexpr int kP = stk::kPack;
constexpr int kUnroll = 2;

// Packs p0, p0 + stride, ... (kUnroll of them, those below `packs`) of a row into x, their loads
// issued together.
template <stk::Dt D>
__device__ __forceinline__ void load_packs(float (&x)[kUnroll][kP], const void *row_data,
                                           int64_t base, int64_t p0, int64_t stride, int64_t packs,
                                           int64_t cols, bool vec) {
#pragma unroll
  for (int u = 0; u < kUnroll; u++) {
    const int64_t p = p0 + u * stride;
    if (p < packs) stk::row_load<D>(x[u], row_data, base, p * kP, cols, vec);
  }
}

// A running softmax denominator: sum of exp(x - max) over the values seen, and their max.
struct Softmax {
  float max, sum;
};

// The pair of two disjoint sets of values. Symmetric in its arguments, bit for bit (max, and
// two products rounded apart before their sum: no fused multiply-add takes one side's product
// unrounded), so a butterfly leaves every lane with the same bits. Sets whose max is -inf
// hold sums of 0, or NaN from a NaN value, which the sum keeps.
__device__ __forceinline__ Softmax combine(Softmax a, Softmax b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, a.sum + b.sum};
  return {m, __fadd_rn(__fmul_rn(a.sum, expf(a.max - m)), __fmul_rn(b.sum, expf(b.max - m)))};
}

__device__ __forceinline__ Softmax warp_combine(Softmax v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const Softmax o = {__shfl_xor_sync(0xffffffffu, v.max, off),
                       __shfl_xor_sync(0xffffffffu, v.sum, off)};
    v = combine(v, o);
  }
  return v;
}

// Over the block (called uniformly): warp pairs, then every thread combines the warps' pairs by
// the same butterfly. Every thread gets the same bits.
__device__ Softmax block_combine(Softmax v, Softmax *scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_combine(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_combine(lane < warps ? scratch[lane] : Softmax{-INFINITY, 0.0f});
}

// Adds the columns of pack x that lie before `vocab` (c0 is the pack's first column). A NaN
// makes the sum NaN, and so the loss, as the CPU's: fmaxf passes it over, so it is looked for.
__device__ __forceinline__ void softmax_add(Softmax &s, const float (&x)[kP], int64_t c0,
                                            int64_t vocab) {
  float m = s.max;
  bool nan = false;
#pragma unroll
  for (int e = 0; e < kP; e++) {
    if (c0 + e < vocab) {
      m = fmaxf(m, x[e]);
      nan |= isnan(x[e]);
    }
  }
  if (m == -INFINITY) { /* no column of the pack counts, or each is -inf or NaN */
    if (nan) s.sum = NAN;
    return;
  }
  float sum = s.sum * expf(s.max - m);
#pragma unroll
  for (int e = 0; e < kP; e++) {
    if (c0 + e < vocab) sum += expf(x[e] - m);
  }
  s = {m, sum};
}

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads, 2)
    classifier_kernel(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                      int64_t vocab, int64_t padded, float dloss_scale, bool vec) {
  __shared__ Softmax scratch[32];
  const int64_t row = blockIdx.x, base = row * padded;
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  float at_target = 0.0f;
  if (threadIdx.x == 0 && valid) at_target = stk::load<D>(logits, base + target);
  const int64_t step = (int64_t)kUnroll * blockDim.x;
  float x[kUnroll][kP];

  Softmax s = {-INFINITY, 0.0f};
  const int64_t vocab_packs = (vocab + kP - 1) / kP;
  for (int64_t p0 = threadIdx.x; p0 < vocab_packs; p0 += step) {
    load_packs<D>(x, logits, base, p0, blockDim.x, vocab_packs, padded, vec);
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const int64_t p = p0 + (int64_t)u * blockDim.x;
      if (p < vocab_packs) softmax_add(s, x[u], p * kP, vocab);
    }
  }
  s = block_combine(s, scratch);
  if (threadIdx.x == 0)
    losses[row] = valid ? logf(s.sum) + s.max - at_target : __uint_as_float(0x7fc00000u);
  if (!dlogits) return;

  const float inv = 1.0f / s.sum;
  const int64_t padded_packs = (padded + kP - 1) / kP;
  for (int64_t p0 = threadIdx.x; p0 < padded_packs; p0 += step) {
    load_packs<D>(x, logits, base, p0, blockDim.x, padded_packs, padded, vec);
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const int64_t p = p0 + (int64_t)u * blockDim.x, c0 = p * kP;
      if (p >= padded_packs) continue;
#pragma unroll
      for (int e = 0; e < kP; e++) {
        const int64_t v = c0 + e;
        x[u][e] = v < vocab
                      ? (expf(x[u][e] - s.max) * inv - (v == target ? 1.0f : 0.0f)) * dloss_scale
                      : 0.0f;
      }
      stk::row_store<D>(dlogits, base, c0, padded, vec, x[u]);
    }
  }
}

}  // namespace

extern "C" st_status cuda_classifier(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                                     const st_tensor *logits, const int32_t *targets, int64_t vocab,
                                     float dloss_scale, const st_stream *stream) {
  (void)ctx;
  const int64_t rows = kernel_rows(logits), padded = kernel_cols(logits);
  void *out = dlogits ? dlogits->data : NULL;
  const bool vec =
      padded % kP == 0 && stk::aligned16(logits->data) && (!out || stk::aligned16(out));
  STK_DISPATCH_DT(logits->dtype,
                  (classifier_kernel<DT><<<(unsigned)rows, kThreads, 0, stk::stream_of(stream)>>>(
                      static_cast<float *>(losses->data), out, logits->data, targets, vocab, padded,
                      dloss_scale, vec)));
  return stk::launched("classifier", "classifier_kernel");
}
