// attention.cu - causal multi-head attention whose saved state is one fp32 per query row: the
// log-sum-exp of its scaled scores (lse = max + log sum exp(s - max)), batch * n_head * seq
// values, never seq x seq (the size kernels/cuda_facts.c gives the engine and the planner). Also
// the cached (generation) forward over a key/value cache.
//
// This is the simple, correct version; flash_attention.cu holds the tiled kernels and
// cudnn_attention.cpp cuDNN's fused attention, used instead for the shapes they take when
// ST_CUDA_ATTENTION names them (cuda_facts.h: cudnn, else flash, else these).
// Every kernel gives one warp one row and loops over the other side of the score matrix in
// order, so every sum has a fixed order and no two warps write one element: deterministic.
// Lane l holds features l, l + 32, ... of a head (head size <= 32 * kDimsPerLane); a dot
// product is the lanes' partial sums through warp_sum's fixed butterfly.
//
//  - attention_forward_kernel, warp per (batch, head, query i), 8 warps per block: one pass over
//    keys 0..(offset + i) with the online softmax (running max m, running normaliser l, output
//    accumulator rescaled when m grows); out = acc / l, lse = m + log l.
//  - attention_dq_kernel, warp per (batch, head, query i): recomputes p_ij = exp(s_ij - lse_i)
//    for j <= i and sums dq_i = scale sum_j p_ij (dO_i.v_j - D_i) k_j, with D_i = dO_i.O_i.
//  - attention_dkv_kernel, warp per (batch, head, key j): for i >= j, the same p_ij and
//    dS_ij = p_ij (dO_i.v_j - D_i) give dv_j = sum_i p_ij dO_i and dk_j = scale sum_i dS_ij q_i
//    (D_i recomputed per pair rather than stored: no scratch).
// Every gradient is written into dqkv once, by the one warp that owns it.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/flash_attention.h"

namespace {

constexpr int kWarps = 8;
constexpr int kDimsPerLane = 8;  // head size up to 256

// Where the rows of one attention live. Element strides; head h adds h * hs to every base.
struct AttnArgs {
  const void *q;
  int64_t q_batch, q_row;
  const void *k;  // v uses k's strides
  const void *v;
  int64_t kv_batch, kv_row;
  void *out;
  int64_t o_batch, o_row;
  float *lse;  // [batch, heads, rows] or NULL
  int64_t batch, heads, rows, hs;
  int64_t key_offset;  // query i sees keys [0, key_offset + i]
  float scale;
};

struct RowId {
  int64_t b, h, i;
};

__device__ __forceinline__ RowId row_of(int64_t warp, int64_t heads, int64_t rows) {
  RowId r;
  r.i = warp % rows;
  r.h = (warp / rows) % heads;
  r.b = warp / (rows * heads);
  return r;
}

template <stk::Dt D>
__device__ __forceinline__ void load_head(float (&x)[kDimsPerLane], const void *p, int64_t base,
                                          int64_t hs, int lane) {
#pragma unroll
  for (int j = 0; j < kDimsPerLane; j++) {
    const int64_t d = lane + 32 * j;
    x[j] = d < hs ? stk::load<D>(p, base + d) : 0.0f;
  }
}

template <stk::Dt D>
__device__ __forceinline__ float dot_head(const float (&x)[kDimsPerLane], const void *p,
                                          int64_t base, int64_t hs, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kDimsPerLane; j++) {
    const int64_t d = lane + 32 * j;
    if (d < hs) s += x[j] * stk::load<D>(p, base + d);
  }
  return stk::warp_sum(s);
}

template <stk::Dt D>
__global__ void attention_forward_kernel(AttnArgs a) {
  const int64_t warp = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= a.batch * a.heads * a.rows) return;
  const RowId r = row_of(warp, a.heads, a.rows);
  float q[kDimsPerLane], acc[kDimsPerLane] = {};
  load_head<D>(q, a.q, r.b * a.q_batch + r.i * a.q_row + r.h * a.hs, a.hs, lane);
  float m = -INFINITY, l = 0.0f;
  const int64_t keys = a.key_offset + r.i + 1;
  for (int64_t j = 0; j < keys; j++) {
    const int64_t kv = r.b * a.kv_batch + j * a.kv_row + r.h * a.hs;
    const float s = a.scale * dot_head<D>(q, a.k, kv, a.hs, lane);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), p = expf(s - m_new);
    l = l * correction + p;
#pragma unroll
    for (int j2 = 0; j2 < kDimsPerLane; j2++) {
      const int64_t d = lane + 32 * j2;
      const float v = d < a.hs ? stk::load<D>(a.v, kv + d) : 0.0f;
      acc[j2] = acc[j2] * correction + p * v;
    }
    m = m_new;
  }
  const int64_t o = r.b * a.o_batch + r.i * a.o_row + r.h * a.hs;
#pragma unroll
  for (int j = 0; j < kDimsPerLane; j++) {
    const int64_t d = lane + 32 * j;
    if (d < a.hs) stk::store<D>(a.out, o + d, acc[j] / l);
  }
  if (a.lse && lane == 0) a.lse[(r.b * a.heads + r.h) * a.rows + r.i] = m + logf(l);
}

// The backward's view: qkv and dqkv [B, T, 3C], out and dout [B, T, C], lse [B, NH, T].
struct AttnGrad {
  const void *qkv;
  void *dqkv;
  const void *out, *dout;
  const float *lse;
  int64_t batch, heads, seq, channels, hs;
  float scale;
};

template <stk::Dt D>
__global__ void attention_dq_kernel(AttnGrad g) {
  const int64_t warp = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= g.batch * g.heads * g.seq) return;
  const RowId r = row_of(warp, g.heads, g.seq);
  const int64_t C3 = 3 * g.channels, qi = (r.b * g.seq + r.i) * C3 + r.h * g.hs;
  const int64_t oi = (r.b * g.seq + r.i) * g.channels + r.h * g.hs;
  float q[kDimsPerLane], dout[kDimsPerLane], dq[kDimsPerLane] = {};
  load_head<D>(q, g.qkv, qi, g.hs, lane);
  load_head<D>(dout, g.dout, oi, g.hs, lane);
  const float Di = dot_head<D>(dout, g.out, oi, g.hs, lane);
  const float lse = g.lse[(r.b * g.heads + r.h) * g.seq + r.i];
  for (int64_t j = 0; j <= r.i; j++) {
    const int64_t kj = (r.b * g.seq + j) * C3 + g.channels + r.h * g.hs;
    const float p = expf(g.scale * dot_head<D>(q, g.qkv, kj, g.hs, lane) - lse);
    const float ds = p * (dot_head<D>(dout, g.qkv, kj + g.channels, g.hs, lane) - Di);
#pragma unroll
    for (int j2 = 0; j2 < kDimsPerLane; j2++) {
      const int64_t d = lane + 32 * j2;
      if (d < g.hs) dq[j2] += ds * stk::load<D>(g.qkv, kj + d);
    }
  }
#pragma unroll
  for (int j = 0; j < kDimsPerLane; j++) {
    const int64_t d = lane + 32 * j;
    if (d < g.hs) stk::store<D>(g.dqkv, qi + d, g.scale * dq[j]);
  }
}

template <stk::Dt D>
__global__ void attention_dkv_kernel(AttnGrad g) {
  const int64_t warp = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= g.batch * g.heads * g.seq) return;
  const RowId r = row_of(warp, g.heads, g.seq);  // r.i is the key row j
  const int64_t C3 = 3 * g.channels, kj = (r.b * g.seq + r.i) * C3 + g.channels + r.h * g.hs;
  float k[kDimsPerLane], v[kDimsPerLane], dk[kDimsPerLane] = {}, dv[kDimsPerLane] = {};
  load_head<D>(k, g.qkv, kj, g.hs, lane);
  load_head<D>(v, g.qkv, kj + g.channels, g.hs, lane);
  for (int64_t i = r.i; i < g.seq; i++) {
    const int64_t qi = (r.b * g.seq + i) * C3 + r.h * g.hs;
    const int64_t oi = (r.b * g.seq + i) * g.channels + r.h * g.hs;
    float dout[kDimsPerLane];
    load_head<D>(dout, g.dout, oi, g.hs, lane);
    const float lse = g.lse[(r.b * g.heads + r.h) * g.seq + i];
    const float p = expf(g.scale * dot_head<D>(k, g.qkv, qi, g.hs, lane) - lse);
    const float dp = dot_head<D>(v, g.dout, oi, g.hs, lane);
    const float Di = dot_head<D>(dout, g.out, oi, g.hs, lane);
    const float ds = p * (dp - Di);
#pragma unroll
    for (int j2 = 0; j2 < kDimsPerLane; j2++) {
      const int64_t d = lane + 32 * j2;
      if (d < g.hs) {
        dv[j2] += p * dout[j2];
        dk[j2] += ds * stk::load<D>(g.qkv, qi + d);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kDimsPerLane; j++) {
    const int64_t d = lane + 32 * j;
    if (d < g.hs) {
      stk::store<D>(g.dqkv, kj + d, g.scale * dk[j]);
      stk::store<D>(g.dqkv, kj + g.channels + d, dv[j]);
    }
  }
}

// k_cache and v_cache rows [past, past + n) = the new tokens' k and v; thread per element.
template <stk::Dt D>
__global__ void cache_store_kernel(void *k_cache, void *v_cache, const void *qkv, int64_t past,
                                   int64_t n, int64_t channels) {
  using T = typename stk::Storage<D>::type;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n * channels; e += stride) {
    const int64_t i = e / channels, c = e % channels;
    const T *src = static_cast<const T *>(qkv) + i * 3 * channels;
    static_cast<T *>(k_cache)[(past + i) * channels + c] = src[channels + c];
    static_cast<T *>(v_cache)[(past + i) * channels + c] = src[2 * channels + c];
  }
}

st_status check_head_size(const char *op, int64_t hs) {
  if (hs <= 32 * kDimsPerLane) return ST_OK;
  return st_error(ST_ERR_UNSUPPORTED, "%s: head size %lld is over the CUDA kernels' %d", op,
                  (long long)hs, 32 * kDimsPerLane);
}

unsigned blocks_for_warps(int64_t warps) { return (unsigned)((warps + kWarps - 1) / kWarps); }

// The tiled kernels (flash_attention.cu) when the context asks for them or for cuDNN's, and they
// take the shape (and the gradient `dout`, when given, is 16-byte aligned for their tile loads).
// Every kind saves the same log-sum-exp, so a forward and its backward may choose differently.
// A call cuDNN did not take (or that was never cuDNN's) is counted when the kind's kernels did
// not run it (kernel_attention_fallbacks).
bool use_flash(void *ctx, const st_tensor *qkv, const st_tensor *dout, int64_t n_head) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  const bool flash = cx->attention != CUDA_ATTENTION_SIMPLE &&
                     cuda_flash_attention_takes(qkv, n_head) &&
                     (!dout || stk::aligned16(dout->data));
  if (cx->attention == CUDA_ATTENTION_CUDNN || (cx->attention == CUDA_ATTENTION_FLASH && !flash)) {
    cx->attention_fallbacks++;
  }
  return flash;
}

}  // namespace

extern "C" const char *cuda_attention_kind_name(void *ctx) {
  switch (static_cast<cuda_context *>(ctx)->attention) {
    case CUDA_ATTENTION_FLASH: return "flash";
    case CUDA_ATTENTION_CUDNN: return "cudnn";
    case CUDA_ATTENTION_SIMPLE: break;
  }
  return "simple";
}

extern "C" int64_t cuda_attention_fallbacks(void *ctx) {
  return static_cast<cuda_context *>(ctx)->attention_fallbacks;
}

extern "C" st_status cuda_attention_forward(void *ctx, const st_tensor *out, const st_tensor *state,
                                            const st_tensor *qkv, int64_t n_head,
                                            const st_stream *stream) {
  if (cuda_cudnn_attention *cudnn = static_cast<cuda_context *>(ctx)->cudnn) {
    int ran = 0;
    ST_CHECK(cuda_cudnn_attention_forward(cudnn, out, state, qkv, n_head, stream, &ran));
    if (ran) return ST_OK;
  }
  if (use_flash(ctx, qkv, NULL, n_head))
    return cuda_flash_attention_forward(out, state, qkv, n_head, stream);
  const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hs = C / n_head;
  ST_CHECK(check_head_size("attention_forward", hs));
  AttnArgs a;
  a.q = qkv->data;
  a.q_batch = T * 3 * C;
  a.q_row = 3 * C;
  a.k = static_cast<const char *>(qkv->data) + C * dtype_size(qkv->dtype);
  a.v = static_cast<const char *>(qkv->data) + 2 * C * dtype_size(qkv->dtype);
  a.kv_batch = T * 3 * C;
  a.kv_row = 3 * C;
  a.out = out->data;
  a.o_batch = T * C;
  a.o_row = C;
  a.lse = static_cast<float *>(state->data);
  a.batch = B;
  a.heads = n_head;
  a.rows = T;
  a.hs = hs;
  a.key_offset = 0;
  a.scale = 1.0f / sqrtf((float)hs);
  STK_DISPATCH_DT(
      qkv->dtype,
      (attention_forward_kernel<DT>
       <<<blocks_for_warps(B * n_head * T), kWarps * 32, 0, stk::stream_of(stream)>>>(a)));
  return stk::launched("attention_forward", "attention_forward_kernel");
}

extern "C" st_status cuda_attention_backward(void *ctx, const st_tensor *dqkv,
                                             const st_tensor *dout, const st_tensor *qkv,
                                             const st_tensor *out, const st_tensor *state,
                                             int64_t n_head, const st_stream *stream) {
  if (cuda_cudnn_attention *cudnn = static_cast<cuda_context *>(ctx)->cudnn) {
    int ran = 0;
    ST_CHECK(
        cuda_cudnn_attention_backward(cudnn, dqkv, dout, qkv, out, state, n_head, stream, &ran));
    if (ran) return ST_OK;
  }
  if (use_flash(ctx, qkv, dout, n_head))
    return cuda_flash_attention_backward(dqkv, dout, qkv, out, state, n_head, stream);
  const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hs = C / n_head;
  ST_CHECK(check_head_size("attention_backward", hs));
  AttnGrad g;
  g.qkv = qkv->data;
  g.dqkv = dqkv->data;
  g.out = out->data;
  g.dout = dout->data;
  g.lse = static_cast<const float *>(state->data);
  g.batch = B;
  g.heads = n_head;
  g.seq = T;
  g.channels = C;
  g.hs = hs;
  g.scale = 1.0f / sqrtf((float)hs);
  const cudaStream_t s = stk::stream_of(stream);
  const unsigned blocks = blocks_for_warps(B * n_head * T);
  STK_DISPATCH_DT(qkv->dtype, (attention_dq_kernel<DT><<<blocks, kWarps * 32, 0, s>>>(g)));
  ST_CHECK(stk::launched("attention_backward", "attention_dq_kernel"));
  STK_DISPATCH_DT(qkv->dtype, (attention_dkv_kernel<DT><<<blocks, kWarps * 32, 0, s>>>(g)));
  return stk::launched("attention_backward", "attention_dkv_kernel");
}

extern "C" st_status cuda_attention_cached_forward(void *ctx, const st_tensor *out,
                                                   const st_tensor *k_cache,
                                                   const st_tensor *v_cache, const st_tensor *qkv,
                                                   int64_t past, int64_t n_head,
                                                   const st_stream *stream) {
  (void)ctx;
  const int64_t n = kernel_rows(qkv), C = kernel_cols(qkv) / 3, hs = C / n_head;
  ST_CHECK(check_head_size("attention_cached_forward", hs));
  const cudaStream_t s = stk::stream_of(stream);
  STK_DISPATCH_DT(qkv->dtype, (cache_store_kernel<DT><<<stk::grid_for(n * C, 256), 256, 0, s>>>(
                                  k_cache->data, v_cache->data, qkv->data, past, n, C)));
  ST_CHECK(stk::launched("attention_cached_forward", "cache_store_kernel"));
  AttnArgs a;
  a.q = qkv->data;
  a.q_batch = 0;
  a.q_row = 3 * C;
  a.k = k_cache->data;
  a.v = v_cache->data;
  a.kv_batch = 0;
  a.kv_row = C;
  a.out = out->data;
  a.o_batch = 0;
  a.o_row = C;
  a.lse = NULL;
  a.batch = 1;
  a.heads = n_head;
  a.rows = n;
  a.hs = hs;
  a.key_offset = past;
  a.scale = 1.0f / sqrtf((float)hs);
  STK_DISPATCH_DT(qkv->dtype, (attention_forward_kernel<DT>
                               <<<blocks_for_warps(n * n_head), kWarps * 32, 0, s>>>(a)));
  return stk::launched("attention_cached_forward", "attention_forward_kernel");
}
