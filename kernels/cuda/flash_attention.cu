// flash_attention.cu - tiled causal attention on the tensor cores (WMMA, 16-bit in, fp32
// accumulate) for head size 64: the forward with the online softmax, and a deterministic
// backward in two kernels. The saved state is attention.cu's: one log-sum-exp per query row.
//
// Tiles are 64 rows; a block is 4 warps, each owning 16 rows of the block's tile, and one block
// works on one (batch, head) and one tile. K, V, Q and dO tiles are staged in shared memory;
// each warp's score block (16 x 64) goes through a per-warp fp32 scratch, where lane l owns row
// l / 2 and the 32 columns of half l % 2, applies the causal mask and the softmax, and writes
// the probabilities (or dS) as 16-bit values for the next product.
//
//  - flash_forward_kernel: a query tile; loops over the key tiles up to the diagonal, keeping
//    the running max m, normaliser l and the output (32 floats per lane) in registers; the
//    product P V lands in the scratch and is added after rescaling. out = O / l,
//    lse = m + log l.
//  - flash_dkv_kernel: a key tile; loops over the query tiles from the diagonal on, recomputes
//    P^T = exp(scale K Q^T - lse) and dP^T = V dO^T, and accumulates dV += P^T dO and
//    dK += dS^T Q (dS = P (dP - D), D_i = dO_i . O_i) in accumulator fragments.
//  - flash_dq_kernel: a query tile; loops over the key tiles up to the diagonal, recomputes P
//    and dP and accumulates dQ += dS K.
// No gradient is written by two blocks, and every sum runs in a fixed order: the backward is
// deterministic without atomics. Each gradient is written into dqkv once, as attention.cu's.
//
// Rounding: P and dS enter their products as 16-bit values (the simple kernels keep them in
// fp32), so results differ from attention.cu's within the 16-bit tolerance.
#include <mma.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"

namespace {

using namespace nvcuda;

constexpr int kTile = 64;  // rows of a tile: queries or keys
constexpr int kHead = 64;  // head size these kernels take
constexpr int kWarpRows = 16;
constexpr int kThreads = 128;  // 4 warps x 16 rows = one tile
constexpr int kFrag = 16;      // WMMA's m = n = k
constexpr int kHalfCols = kTile / 2;

// The WMMA element type for a 16-bit dtype.
template <stk::Dt D>
struct Wmma;
template <>
struct Wmma<stk::Dt::BF16> {
  using type = __nv_bfloat16;
};
template <>
struct Wmma<stk::Dt::F16> {
  using type = __half;
};

template <stk::Dt D>
using FragA =
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, typename Wmma<D>::type, wmma::row_major>;
template <stk::Dt D, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, typename Wmma<D>::type, Layout>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// Where one (batch, head) lives: qkv [B, T, 3C], out and dout [B, T, C], lse [B, NH, T].
struct FlashArgs {
  const uint16_t *qkv;
  uint16_t *dqkv;
  const uint16_t *out;
  uint16_t *out_w;  // the forward's output
  const uint16_t *dout;
  float *lse;
  int64_t heads, seq, channels;
  float scale;
};

struct Head {
  int64_t b, h;
};

// Element offset of row t's head-h slice of part (0 q, 1 k, 2 v) in qkv.
__device__ __forceinline__ int64_t qkv_at(const FlashArgs &a, Head hd, int64_t t, int part) {
  return (hd.b * a.seq + t) * 3 * a.channels + part * a.channels + hd.h * kHead;
}

// Element offset of row t's head-h slice in out / dout.
__device__ __forceinline__ int64_t out_at(const FlashArgs &a, Head hd, int64_t t) {
  return (hd.b * a.seq + t) * a.channels + hd.h * kHead;
}

// Stages rows [row0, row0 + 64) of a tensor (row r at base(r), kHead elements) into a shared
// [64][kHead] tile with 16-byte loads; rows past the sequence are zeros. All threads call it.
template <typename RowBase>
__device__ __forceinline__ void stage_tile(uint16_t (*tile)[kHead], const uint16_t *src,
                                           int64_t row0, int64_t seq, RowBase base) {
  constexpr int kChunks = kHead / 8;  // int4 per row
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    int4 v = make_int4(0, 0, 0, 0);
    if (row0 + r < seq) v = *reinterpret_cast<const int4 *>(src + base(row0 + r) + c * 8);
    *reinterpret_cast<int4 *>(&tile[r][c * 8]) = v;
  }
}

template <stk::Dt D>
__device__ __forceinline__ const typename Wmma<D>::type *wm(const uint16_t *p) {
  return reinterpret_cast<const typename Wmma<D>::type *>(p);
}

// acc[n] += A times B, where A is the warp's 16 x 64 block of 16-bit values in shared memory
// (row-major, ld kTile) and B's blocks come from a row-major [64][kHead] tile.
template <stk::Dt D>
__device__ __forceinline__ void accumulate(FragAcc (&acc)[4], const uint16_t (*a)[kTile],
                                           const uint16_t (*b)[kHead]) {
#pragma unroll
  for (int k = 0; k < 4; k++) {
    FragA<D> fa;
    wmma::load_matrix_sync(fa, wm<D>(&a[0][k * kFrag]), kTile);
#pragma unroll
    for (int n = 0; n < 4; n++) {
      FragB<D, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, wm<D>(&b[k * kFrag][n * kFrag]), kHead);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// The four row-major A fragments of rows [16 w, 16 w + 16) of a staged tile.
template <stk::Dt D>
__device__ __forceinline__ void load_rows(FragA<D> (&a)[4], const uint16_t (*tile)[kHead],
                                          int warp) {
#pragma unroll
  for (int k = 0; k < 4; k++)
    wmma::load_matrix_sync(a[k], wm<D>(&tile[warp * kWarpRows][k * kFrag]), kHead);
}

// Stores four accumulator fragments as the warp's 16 x 64 fp32 scratch.
__device__ __forceinline__ void spill(float (*scratch)[kTile], const FragAcc (&acc)[4]) {
#pragma unroll
  for (int n = 0; n < 4; n++)
    wmma::store_matrix_sync(&scratch[0][n * kFrag], acc[n], kTile, wmma::mem_row_major);
}

// The warp's scratch = A (16 x 64, four row-major fragments) times the transpose of a staged
// row-major [64][kHead] tile (K^T, Q^T, V^T, dO^T: col-major reads of the same bytes). Every lane
// of the warp calls it; on return every lane may read the scratch.
template <stk::Dt D>
__device__ __forceinline__ void product_t(float (*scratch)[kTile], const FragA<D> (&a)[4],
                                          const uint16_t (*tile)[kHead]) {
  FragAcc acc[4];
#pragma unroll
  for (int n = 0; n < 4; n++) {
    wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      FragB<D, wmma::col_major> b;
      wmma::load_matrix_sync(b, wm<D>(&tile[n * kFrag][k * kFrag]), kHead);
      wmma::mma_sync(acc[n], a[k], b, acc[n]);
    }
  }
  __syncwarp();  // every lane is done with the scratch's previous contents
  spill(scratch, acc);
  __syncwarp();
}

// D_i = dO_i . O_i for the 64 rows of a staged dO tile starting at row0; two threads per row.
template <stk::Dt D>
__device__ __forceinline__ void row_dots(float *dots, const uint16_t (*dout)[kHead],
                                         const FlashArgs &a, Head hd, int64_t row0) {
  const int r = threadIdx.x / 2, half = threadIdx.x % 2;
  float s = 0.0f;
  if (row0 + r < a.seq) {
    const int64_t o = out_at(a, hd, row0 + r);
    for (int d = half * kHalfCols; d < (half + 1) * kHalfCols; d++)
      s += stk::to_float<D>(dout[r][d]) * stk::load<D>(a.out, o + d);
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (half == 0) dots[r] = s;
}

// Where a thread works: the block's (batch, head) and 64-row tile (the longest tiles are launched
// first), which starts at row0; the thread's warp, its row r among the warp's 16 and the half of
// the 64 columns it owns (from c0); and that row's index in the sequence. The kernels index their
// shared arrays with at.warp rather than keep pointers to the warp's slices: such pointers made
// ptxas spill registers.
struct Place {
  Head hd;
  int warp, r, c0;
  int64_t tile, row0, row;
};

__device__ __forceinline__ Place place_of(const FlashArgs &a) {
  const int lane = threadIdx.x % 32;
  Place p;
  p.hd = Head{(int64_t)blockIdx.x / a.heads, (int64_t)blockIdx.x % a.heads};
  p.warp = (int)threadIdx.x / 32;
  p.r = lane / 2;
  p.c0 = (lane % 2) * kHalfCols;
  p.tile = (int64_t)(gridDim.y - 1 - blockIdx.y);
  p.row0 = p.tile * kTile;
  p.row = p.row0 + p.warp * kWarpRows + p.r;
  return p;
}

// Writes scale * (four fragments) into the warp's 16 rows of head slice `part` of dqkv, through
// the warp's scratch; each lane writes its half of its row. Rows past the sequence are skipped.
template <stk::Dt D>
__device__ __forceinline__ void write_rows(const FlashArgs &a, const Place &at, int part,
                                           float scale, const FragAcc (&acc)[4],
                                           float (*scratch)[kTile]) {
  __syncwarp();
  spill(scratch, acc);
  __syncwarp();
  if (at.row >= a.seq) return;
  const int64_t base = qkv_at(a, at.hd, at.row, part);
  for (int c = at.c0; c < at.c0 + kHalfCols; c++)
    stk::store<D>(a.dqkv, base + c, scale * scratch[at.r][c]);
}

// K and V of key rows [k0, k0 + 64) into two staged tiles. All threads call it.
__device__ __forceinline__ void stage_kv(uint16_t (*ks)[kHead], uint16_t (*vs)[kHead],
                                         const FlashArgs &a, Head hd, int64_t k0) {
  stage_tile(ks, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 1); });
  stage_tile(vs, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 2); });
}

// The shared memory of a backward block: two staged 64-row tiles, each warp's fp32 scratch and
// 16-bit P or dS block, and the log-sum-exp and D = dO . O of the 64 query rows in hand.
struct BackwardShared {
  uint16_t a[kTile][kHead], b[kTile][kHead];
  float scratch[kThreads / 32][kWarpRows][kTile];
  uint16_t ds[kThreads / 32][kWarpRows][kTile];
  float lse[kTile], dots[kTile];
};

// The saved log-sum-exp of query rows [row0, row0 + 64) into lse; +inf past the sequence, so
// that their probabilities are 0. Threads 0-63 write.
__device__ __forceinline__ void stage_lse(float *lse, const FlashArgs &a, Head hd, int64_t row0) {
  if (threadIdx.x >= kTile) return;
  const int64_t t = row0 + threadIdx.x;
  lse[threadIdx.x] = t < a.seq ? a.lse[(hd.b * a.heads + hd.h) * a.seq + t] : INFINITY;
}

// Query rows [q0, q0 + 64) of a backward block: Q into sm.a, dO into sm.b, their log-sum-exp
// and D = dO . O. All threads call it; on return every thread may read them.
template <stk::Dt D>
__device__ __forceinline__ void stage_queries(BackwardShared &sm, const FlashArgs &a, Head hd,
                                              int64_t q0) {
  stage_tile(sm.a, a.qkv, q0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 0); });
  stage_tile(sm.b, a.dout, q0, a.seq, [&](int64_t t) { return out_at(a, hd, t); });
  stage_lse(sm.lse, a, hd, q0);
  __syncthreads();
  row_dots<D>(sm.dots, sm.b, a, hd, q0);
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Forward.

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(FlashArgs a) {
  __shared__ __align__(128) uint16_t ks[kTile][kHead];
  __shared__ __align__(128) uint16_t vs[kTile][kHead];
  __shared__ __align__(128) float scratch[kThreads / 32][kWarpRows][kTile];
  __shared__ __align__(128) uint16_t probs[kThreads / 32][kWarpRows][kTile];
  const Place at = place_of(a);  // at.row: this lane's query

  // Q through the K buffer into registers.
  stage_tile(ks, a.qkv, at.row0, a.seq, [&](int64_t t) { return qkv_at(a, at.hd, t, 0); });
  __syncthreads();
  FragA<D> q[4];
  load_rows<D>(q, ks, at.warp);

  float o[kHalfCols] = {}, m = -INFINITY, l = 0.0f;
  for (int64_t kt = 0; kt <= at.tile; kt++) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous K, V (and Q) tiles
    stage_kv(ks, vs, a, at.hd, k0);
    __syncthreads();

    product_t<D>(scratch[at.warp], q, ks);  // S = Q K^T
    float tile_max = -INFINITY;
    float s[kHalfCols];
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const int64_t j = k0 + at.c0 + c;
      s[c] = (j <= at.row && j < a.seq) ? a.scale * scratch[at.warp][at.r][at.c0 + c] : -INFINITY;
      tile_max = fmaxf(tile_max, s[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    // A row with no visible key yet (only rows past the sequence) keeps m = -inf: no update.
    const float correction = m_new == -INFINITY ? 1.0f : __expf(m - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const float p = s[c] == -INFINITY ? 0.0f : __expf(s[c] - m_new);
      sum += p;
      probs[at.warp][at.r][at.c0 + c] = stk::from_float<D>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * correction + sum;
    m = m_new;
    __syncwarp();

    // P V into the scratch, then O = O * correction + P V.
    FragAcc acc[4];
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.0f);
    accumulate<D>(acc, probs[at.warp], vs);
    spill(scratch[at.warp], acc);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalfCols; c++)
      o[c] = o[c] * correction + scratch[at.warp][at.r][at.c0 + c];
    __syncwarp();
  }

  if (at.row >= a.seq) return;
  const int64_t out = out_at(a, at.hd, at.row);
#pragma unroll
  for (int c = 0; c < kHalfCols; c++) stk::store<D>(a.out_w, out + at.c0 + c, o[c] / l);
  if (at.c0 == 0) a.lse[(at.hd.b * a.heads + at.hd.h) * a.seq + at.row] = m + logf(l);
}

// ---------------------------------------------------------------------------------------------
// Backward: dK and dV per key tile.

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads) flash_dkv_kernel(FlashArgs a) {
  __shared__ __align__(128) BackwardShared sm;
  const Place at = place_of(a);  // at.row: this lane's key

  // K and V through the Q and dO buffers into registers.
  stage_kv(sm.a, sm.b, a, at.hd, at.row0);
  __syncthreads();
  FragA<D> k[4], v[4];
  load_rows<D>(k, sm.a, at.warp);
  load_rows<D>(v, sm.b, at.warp);

  FragAcc dk[4], dv[4];
#pragma unroll
  for (int n = 0; n < 4; n++) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int64_t tiles = (a.seq + kTile - 1) / kTile;
  for (int64_t qt = at.tile; qt < tiles; qt++) {
    const int64_t q0 = qt * kTile;
    __syncthreads();  // every warp is done with the previous Q and dO tiles (and K, V)
    stage_queries<D>(sm, a, at.hd, q0);

    product_t<D>(sm.scratch[at.warp], k, sm.a);  // S^T = K Q^T
    float p[kHalfCols];  // P^T, and as 16-bit values into the warp's block of sm.ds
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const int64_t i = q0 + at.c0 + c;
      const bool seen = i >= at.row && i < a.seq && at.row < a.seq;
      p[c] =
          seen ? __expf(a.scale * sm.scratch[at.warp][at.r][at.c0 + c] - sm.lse[at.c0 + c]) : 0.0f;
      sm.ds[at.warp][at.r][at.c0 + c] = stk::from_float<D>(p[c]);
    }
    __syncwarp();
    accumulate<D>(dv, sm.ds[at.warp], sm.b);     // dV += P^T dO
    product_t<D>(sm.scratch[at.warp], v, sm.b);  // dP^T = V dO^T
#pragma unroll
    for (int c = 0; c < kHalfCols; c++)
      sm.ds[at.warp][at.r][at.c0 + c] =
          stk::from_float<D>(p[c] * (sm.scratch[at.warp][at.r][at.c0 + c] - sm.dots[at.c0 + c]));
    __syncwarp();
    accumulate<D>(dk, sm.ds[at.warp], sm.a);  // dK += dS^T Q
  }
  write_rows<D>(a, at, 1, a.scale, dk, sm.scratch[at.warp]);
  write_rows<D>(a, at, 2, 1.0f, dv, sm.scratch[at.warp]);
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ per query tile.

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(FlashArgs a) {
  __shared__ __align__(128) BackwardShared sm;
  const Place at = place_of(a);  // at.row: this lane's query

  // Q and dO through the K and V buffers into registers; lse and D of this lane's row.
  stage_queries<D>(sm, a, at.hd, at.row0);
  FragA<D> q[4], dout[4];
  load_rows<D>(q, sm.a, at.warp);
  load_rows<D>(dout, sm.b, at.warp);
  const int in_tile = at.warp * kWarpRows + at.r;
  const float row_lse = sm.lse[in_tile], row_dot = sm.dots[in_tile];

  FragAcc dq[4];
#pragma unroll
  for (int n = 0; n < 4; n++) wmma::fill_fragment(dq[n], 0.0f);
  for (int64_t kt = 0; kt <= at.tile; kt++) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous K and V tiles (and Q, dO)
    stage_kv(sm.a, sm.b, a, at.hd, k0);
    __syncthreads();

    product_t<D>(sm.scratch[at.warp], q, sm.a);  // S = Q K^T
    float p[kHalfCols];
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const int64_t j = k0 + at.c0 + c;
      const bool seen = j <= at.row && j < a.seq && at.row < a.seq;
      p[c] = seen ? __expf(a.scale * sm.scratch[at.warp][at.r][at.c0 + c] - row_lse) : 0.0f;
    }
    product_t<D>(sm.scratch[at.warp], dout, sm.b);  // dP = dO V^T
#pragma unroll
    for (int c = 0; c < kHalfCols; c++)
      sm.ds[at.warp][at.r][at.c0 + c] =
          stk::from_float<D>(p[c] * (sm.scratch[at.warp][at.r][at.c0 + c] - row_dot));
    __syncwarp();
    accumulate<D>(dq, sm.ds[at.warp], sm.a);  // dQ += dS K
  }
  write_rows<D>(a, at, 0, a.scale, dq, sm.scratch[at.warp]);
}

FlashArgs args_of(const st_tensor *qkv, int64_t n_head) {
  FlashArgs a{};
  a.qkv = static_cast<const uint16_t *>(qkv->data);
  a.heads = n_head;
  a.seq = qkv->shape[1];
  a.channels = qkv->shape[2] / 3;
  a.scale = 1.0f / sqrtf((float)kHead);
  return a;
}

dim3 grid_of(const st_tensor *qkv, int64_t n_head) {
  const int64_t tiles = (qkv->shape[1] + kTile - 1) / kTile;
  return dim3((unsigned)(qkv->shape[0] * n_head), (unsigned)tiles);
}

// Runs KERNEL<DT> for the 16-bit dtype of qkv.
#define FLASH_LAUNCH(dtype, kernel, grid, stream, args)               \
  do {                                                                \
    if ((dtype) == ST_BF16)                                           \
      kernel<stk::Dt::BF16><<<(grid), kThreads, 0, (stream)>>>(args); \
    else                                                              \
      kernel<stk::Dt::F16><<<(grid), kThreads, 0, (stream)>>>(args);  \
  } while (0)

}  // namespace

extern "C" int cuda_flash_attention_takes(const st_tensor *qkv, int64_t n_head) {
  if (qkv->dtype != ST_BF16 && qkv->dtype != ST_FP16) return 0;
  const int64_t C = qkv->shape[2] / 3;
  // 16-byte row loads need every head slice 16-byte aligned: C a multiple of 8 elements.
  return n_head > 0 && C == n_head * kHead && C % 8 == 0 && stk::aligned16(qkv->data) &&
         qkv->shape[0] * n_head <= INT32_MAX && qkv->shape[1] / kTile < 65535;
}

extern "C" st_status cuda_flash_attention_forward(const st_tensor *out, const st_tensor *state,
                                                  const st_tensor *qkv, int64_t n_head,
                                                  const st_stream *stream) {
  FlashArgs a = args_of(qkv, n_head);
  a.out_w = static_cast<uint16_t *>(out->data);
  a.lse = static_cast<float *>(state->data);
  FLASH_LAUNCH(qkv->dtype, flash_forward_kernel, grid_of(qkv, n_head), stk::stream_of(stream), a);
  return stk::launched("attention_forward", "flash_forward_kernel");
}

extern "C" st_status cuda_flash_attention_backward(const st_tensor *dqkv, const st_tensor *dout,
                                                   const st_tensor *qkv, const st_tensor *out,
                                                   const st_tensor *state, int64_t n_head,
                                                   const st_stream *stream) {
  FlashArgs a = args_of(qkv, n_head);
  a.dqkv = static_cast<uint16_t *>(dqkv->data);
  a.out = static_cast<const uint16_t *>(out->data);
  a.dout = static_cast<const uint16_t *>(dout->data);
  a.lse = static_cast<float *>(state->data);
  const dim3 grid = grid_of(qkv, n_head);
  const cudaStream_t s = stk::stream_of(stream);
  FLASH_LAUNCH(qkv->dtype, flash_dkv_kernel, grid, s, a);
  ST_CHECK(stk::launched("attention_backward", "flash_dkv_kernel"));
  FLASH_LAUNCH(qkv->dtype, flash_dq_kernel, grid, s, a);
  return stk::launched("attention_backward", "flash_dq_kernel");
}
