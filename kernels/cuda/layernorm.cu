// layernorm.cu - LayerNorm over the last dimension, forward (plain, or with the residual add
// fused in front) and backward.
//
// Launch shape: one warp per row, 8 warps (256 threads) per block, grid ceil(N / 8). Lane l
// handles features l, l + 32, ...: each pass over a row is one coalesced sweep, and the row's
// sums are warp_sum's fixed butterfly, so results do not depend on the grid. The forward makes
// three sweeps (sum, centred sum of squares, output): the two-pass variance of the CPU backend,
// accurate when the mean is large against the spread; the later sweeps hit L1/L2.
//
// The backward's input gradient is per row (one warp per row again); the weight and bias
// gradients are sums over rows, done by colsum.cu's deterministic two-launch column sum.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kWarps = 8;

template <stk::Dt D, bool RESIDUAL>
__global__ void layernorm_forward_kernel(void *residual, void *out, float *mean, float *rstd,
                                         const void *a, const void *b, const void *weight,
                                         const void *bias, int64_t rows, int64_t channels) {
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * channels;
  // The input is a, or residual = a + b rounded to the dtype (what the backward will read).
  const void *x = RESIDUAL ? residual : a;
  float sum = 0.0f;
  for (int64_t c = lane; c < channels; c += 32) {
    float v;
    if (RESIDUAL) {
      const typename stk::Storage<D>::type r =
          stk::from_float<D>(stk::load<D>(a, base + c) + stk::load<D>(b, base + c));
      static_cast<typename stk::Storage<D>::type *>(residual)[base + c] = r;
      v = stk::to_float<D>(r);
    } else {
      v = stk::load<D>(a, base + c);
    }
    sum += v;
  }
  const float m = stk::warp_sum(sum) / (float)channels;
  float var = 0.0f;
  for (int64_t c = lane; c < channels; c += 32) {
    const float d = stk::load<D>(x, base + c) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(stk::warp_sum(var) / (float)channels + KERNEL_LAYERNORM_EPS);
  for (int64_t c = lane; c < channels; c += 32) {
    const float xhat = (stk::load<D>(x, base + c) - m) * s;
    stk::store<D>(out, base + c, xhat * stk::load<D>(weight, c) + stk::load<D>(bias, c));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight, per row.
template <stk::Dt D>
__global__ void layernorm_dinp_kernel(void *dinp, const void *dout, const void *inp,
                                      const void *weight, const float *mean, const float *rstd,
                                      int64_t rows, int64_t channels) {
  const int64_t row = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * channels;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t c = lane; c < channels; c += 32) {
    const float g = stk::load<D>(dout, base + c) * stk::load<D>(weight, c);
    const float xhat = (stk::load<D>(inp, base + c) - m) * s;
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = stk::warp_sum(g_sum) / (float)channels;
  const float gx_mean = stk::warp_sum(gx_sum) / (float)channels;
  for (int64_t c = lane; c < channels; c += 32) {
    const float g = stk::load<D>(dout, base + c) * stk::load<D>(weight, c);
    const float xhat = (stk::load<D>(inp, base + c) - m) * s;
    stk::store<D>(dinp, base + c, stk::load<D>(dinp, base + c) + s * (g - g_mean - xhat * gx_mean));
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
  if (residual) {
    STK_DISPATCH_DT(
        a->dtype, (layernorm_forward_kernel<DT, true><<<blocks_for_rows(rows), kWarps * 32, 0, s>>>(
                      residual->data, out->data, mu, rs, a->data, b->data, weight->data, bias->data,
                      rows, channels)));
  } else {
    STK_DISPATCH_DT(
        a->dtype,
        (layernorm_forward_kernel<DT, false><<<blocks_for_rows(rows), kWarps * 32, 0, s>>>(
            NULL, out->data, mu, rs, a->data, NULL, weight->data, bias->data, rows, channels)));
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
  STK_DISPATCH_DT(
      inp->dtype,
      (layernorm_dinp_kernel<DT><<<blocks_for_rows(rows), kWarps * 32, 0, stk::stream_of(stream)>>>(
          dinp->data, dout->data, inp->data, weight->data, mu, rs, rows, channels)));
  ST_CHECK(stk::launched("layernorm_backward", "layernorm_dinp_kernel"));
  return cuda_colsum(ctx, "layernorm_backward", CUDA_COLSUM_LAYERNORM, inp->dtype, rows, channels,
                     dout->data, inp->data, mu, rs, dweight->data, dbias->data, stream);
}
