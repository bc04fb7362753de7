// layernorm.cu - LayerNorm over the last dimension, forward (plain, or with the residual add
// fused in front) and backward.
//
// Launch shape: one warp per row, 8 warps (256 threads) per block, grid ceil(N / 8). Lane l
// owns the groups of 8 features l, l + 32, ... of its row, read with 16-byte loads when the
// row length is a multiple of 8 and the buffers are 16-byte aligned (else element by element,
// the same elements in the same order, so the bits do not depend on the path). A row's sums
// are warp_sum's fixed butterfly, so results do not depend on the grid either. The forward makes
// three sweeps (sum, centred sum of squares, output): the two-pass variance of the CPU backend,
// accurate when the mean is large against the spread; the later sweeps hit L1/L2.
//
// The backward's input gradient is per row (one warp per row again); the weight and bias
// gradients are sums over rows, done by colsum.cu's deterministic two-launch column sum (into
// inp's dtype, or fp32 gradients beside 16-bit activations).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kWarps = 8;
constexpr int kP = stk::kPack;

// Lane l owns the 8-element groups l, l + 32, ... of its row (features 8l .. 8l + 7, then
// 8(l + 32) ..): consecutive lanes read consecutive 16-byte pieces.
template <stk::Dt D, bool RESIDUAL>
__global__ void layernorm_forward_kernel(void *residual, void *out, float *mean, float *rstd,
                                         const void *a, const void *b, const void *weight,
                                         const void *bias, int64_t rows, int64_t channels,
                                         bool vec) {
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * channels, groups = (channels + kP - 1) / kP;
  // The input is a, or residual = a + b rounded to the dtype (what the backward will read).
  const void *x = RESIDUAL ? residual : a;
  float sum = 0.0f;
  for (int64_t g = lane; g < groups; g += 32) {
    const int64_t c0 = g * kP;
    float v[kP];
    stk::row_load<D>(v, a, base, c0, channels, vec);
    if (RESIDUAL) {
      float w[kP];
      stk::row_load<D>(w, b, base, c0, channels, vec);
#pragma unroll
      for (int e = 0; e < kP; e++) v[e] = stk::to_float<D>(stk::from_float<D>(v[e] + w[e]));
      stk::row_store<D>(residual, base, c0, channels, vec, v);
    }
#pragma unroll
    for (int e = 0; e < kP; e++) {
      if (c0 + e < channels) sum += v[e];
    }
  }
  const float m = stk::warp_sum(sum) / (float)channels;
  // The lane reads back only what it wrote itself (residual may alias a or b).
  float var = 0.0f;
  for (int64_t g = lane; g < groups; g += 32) {
    const int64_t c0 = g * kP;
    float v[kP];
    stk::row_load<D>(v, x, base, c0, channels, vec);
#pragma unroll
    for (int e = 0; e < kP; e++) {
      if (c0 + e < channels) var += (v[e] - m) * (v[e] - m);
    }
  }
  const float s = 1.0f / sqrtf(stk::warp_sum(var) / (float)channels + KERNEL_LAYERNORM_EPS);
  for (int64_t g = lane; g < groups; g += 32) {
    const int64_t c0 = g * kP;
    float v[kP], w[kP], bb[kP];
    stk::row_load<D>(v, x, base, c0, channels, vec);
    stk::row_load<D>(w, weight, 0, c0, channels, vec);
    stk::row_load<D>(bb, bias, 0, c0, channels, vec);
#pragma unroll
    for (int e = 0; e < kP; e++) v[e] = (v[e] - m) * s * w[e] + bb[e];
    stk::row_store<D>(out, base, c0, channels, vec, v);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight, per row; the same lane
// layout as the forward.
template <stk::Dt D>
__global__ void layernorm_dinp_kernel(void *dinp, const void *dout, const void *inp,
                                      const void *weight, const float *mean, const float *rstd,
                                      int64_t rows, int64_t channels, bool vec) {
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * channels, groups = (channels + kP - 1) / kP;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t gi = lane; gi < groups; gi += 32) {
    const int64_t c0 = gi * kP;
    float dy[kP], x[kP], w[kP];
    stk::row_load<D>(dy, dout, base, c0, channels, vec);
    stk::row_load<D>(x, inp, base, c0, channels, vec);
    stk::row_load<D>(w, weight, 0, c0, channels, vec);
#pragma unroll
    for (int e = 0; e < kP; e++) {
      if (c0 + e < channels) {
        const float g = dy[e] * w[e];
        g_sum += g;
        gx_sum += g * ((x[e] - m) * s);
      }
    }
  }
  const float g_mean = stk::warp_sum(g_sum) / (float)channels;
  const float gx_mean = stk::warp_sum(gx_sum) / (float)channels;
  for (int64_t gi = lane; gi < groups; gi += 32) {
    const int64_t c0 = gi * kP;
    float dy[kP], x[kP], w[kP], dx[kP];
    stk::row_load<D>(dy, dout, base, c0, channels, vec);
    stk::row_load<D>(x, inp, base, c0, channels, vec);
    stk::row_load<D>(w, weight, 0, c0, channels, vec);
    stk::row_load<D>(dx, dinp, base, c0, channels, vec);
#pragma unroll
    for (int e = 0; e < kP; e++) {
      dx[e] += s * (dy[e] * w[e] - g_mean - (x[e] - m) * s * gx_mean);
    }
    stk::row_store<D>(dinp, base, c0, channels, vec, dx);
  }
}

unsigned blocks_for_rows(int64_t rows) { return (unsigned)((rows + kWarps - 1) / kWarps); }

}  // namespace

extern "C" st_status cuda_layernorm_forward(void *ctx, const st_tensor *residual,
                                            const st_tensor *out, const st_tensor *mean,
                                            const st_tensor *rstd, const st_tensor *a,
                                            const st_tensor *b, const st_tensor *weight,
                                            const st_tensor *bias, const st_stream *stream) {
  (void)ctx;
  const int64_t rows = kernel_rows(a), channels = kernel_cols(a);
  const cudaStream_t s = stk::stream_of(stream);
  float *mu = static_cast<float *>(mean->data), *rs = static_cast<float *>(rstd->data);
  const bool vec = channels % kP == 0 && stk::aligned16(a->data) && stk::aligned16(out->data) &&
                   stk::aligned16(weight->data) && stk::aligned16(bias->data) &&
                   (!residual || (stk::aligned16(b->data) && stk::aligned16(residual->data)));
  if (residual) {
    STK_DISPATCH_DT(
        a->dtype, (layernorm_forward_kernel<DT, true><<<blocks_for_rows(rows), kWarps * 32, 0, s>>>(
                      residual->data, out->data, mu, rs, a->data, b->data, weight->data, bias->data,
                      rows, channels, vec)));
  } else {
    STK_DISPATCH_DT(a->dtype, (layernorm_forward_kernel<DT, false>
                               <<<blocks_for_rows(rows), kWarps * 32, 0, s>>>(
                                   NULL, out->data, mu, rs, a->data, NULL, weight->data, bias->data,
                                   rows, channels, vec)));
  }
  return stk::launched(residual ? "layernorm_residual_forward" : "layernorm_forward",
                       "layernorm_forward_kernel");
}

extern "C" st_status cuda_layernorm_backward(void *ctx, const st_tensor *dinp,
                                             const st_tensor *dweight, const st_tensor *dbias,
                                             const st_tensor *dout, const st_tensor *inp,
                                             const st_tensor *weight, const st_tensor *mean,
                                             const st_tensor *rstd, const st_stream *stream) {
  const int64_t rows = kernel_rows(inp), channels = kernel_cols(inp);
  const float *mu = static_cast<const float *>(mean->data);
  const float *rs = static_cast<const float *>(rstd->data);
  const bool vec = channels % kP == 0 && stk::aligned16(dinp->data) && stk::aligned16(dout->data) &&
                   stk::aligned16(inp->data) && stk::aligned16(weight->data);
  // A width the parameter gradients' sum cannot take is refused before dinp is touched.
  ST_CHECK(cuda_colsum_check("layernorm_backward", CUDA_COLSUM_LAYERNORM, channels));
  STK_DISPATCH_DT(
      inp->dtype,
      (layernorm_dinp_kernel<DT><<<blocks_for_rows(rows), kWarps * 32, 0, stk::stream_of(stream)>>>(
          dinp->data, dout->data, inp->data, weight->data, mu, rs, rows, channels, vec)));
  ST_CHECK(stk::launched("layernorm_backward", "layernorm_dinp_kernel"));
  return cuda_colsum(ctx, "layernorm_backward", CUDA_COLSUM_LAYERNORM, inp->dtype, rows, channels,
                     dout->data, inp->data, mu, rs, dweight->dtype, dweight->data, dbias->data,
                     stream);
}
