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
// deterministic without atomics. Each gradient is added (+=) into dqkv once, as attention.cu's.
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

__device__ __forceinline__ Head head_of(const FlashArgs &a) {
  return Head{(int64_t)blockIdx.x / a.heads, (int64_t)blockIdx.x % a.heads};
}

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

// acc[n] = A (16 x 64, four row-major fragments) times the 64 x 64 matrix whose 16 x 16 block
// (k, n) the loader gives; four output fragments of 16 columns.
template <stk::Dt D, typename Layout, typename LoadB>
__device__ __forceinline__ void product(FragAcc (&acc)[4], const FragA<D> (&a)[4], LoadB load_b) {
#pragma unroll
  for (int n = 0; n < 4; n++) {
    wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      FragB<D, Layout> b;
      load_b(b, k, n);
      wmma::mma_sync(acc[n], a[k], b, acc[n]);
    }
  }
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

// The loaders of the second factor: the transpose of a row-major [64][kHead] tile (K^T, Q^T,
// V^T, dO^T: col-major reads of the same bytes).
template <stk::Dt D>
struct Transposed {
  const uint16_t (*tile)[kHead];
  __device__ void operator()(FragB<D, wmma::col_major> &b, int k, int n) const {
    wmma::load_matrix_sync(b, wm<D>(&tile[n * kFrag][k * kFrag]), kHead);
  }
};

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

// Adds scale * (four fragments) into the warp's 16 rows of head slice `part` of dqkv, through
// the scratch. Rows past the sequence are skipped.
template <stk::Dt D>
__device__ __forceinline__ void add_rows(const FlashArgs &a, Head hd, int64_t row0, int part,
                                         float scale, const FragAcc (&acc)[4],
                                         float (*scratch)[kTile]) {
  const int lane = threadIdx.x % 32;
  __syncwarp();
  spill(scratch, acc);
  __syncwarp();
  const int r = lane / 2, c0 = (lane % 2) * kHalfCols;
  if (row0 + r >= a.seq) return;
  const int64_t base = qkv_at(a, hd, row0 + r, part);
  for (int c = c0; c < c0 + kHalfCols; c++)
    stk::store<D>(a.dqkv, base + c, stk::load<D>(a.dqkv, base + c) + scale * scratch[r][c]);
}

// Where a thread works: its warp, its row among the warp's 16 and the half of the 64 columns it
// owns, and the block's tile (the longest tiles are launched first).
struct Place {
  int warp, r, c0;
  int64_t tile;
};

__device__ __forceinline__ Place place_of() {
  const int lane = threadIdx.x % 32;
  return Place{(int)threadIdx.x / 32, lane / 2, (lane % 2) * kHalfCols,
               (int64_t)(gridDim.y - 1 - blockIdx.y)};
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

// ---------------------------------------------------------------------------------------------
// Forward.

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(FlashArgs a) {
  __shared__ __align__(128) uint16_t ks[kTile][kHead];
  __shared__ __align__(128) uint16_t vs[kTile][kHead];
  __shared__ __align__(128) float scratch[kThreads / 32][kWarpRows][kTile];
  __shared__ __align__(128) uint16_t probs[kThreads / 32][kWarpRows][kTile];
  const Head hd = head_of(a);
  const Place at = place_of();
  const int warp = at.warp, r = at.r, c0 = at.c0;
  const int64_t tile = at.tile, q0 = tile * kTile;
  const int64_t i = q0 + warp * kWarpRows + r;  // this lane's query

  // Q through the K buffer into registers.
  stage_tile(ks, a.qkv, q0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 0); });
  __syncthreads();
  FragA<D> q[4];
  load_rows<D>(q, ks, warp);

  float o[kHalfCols] = {}, m = -INFINITY, l = 0.0f;
  for (int64_t kt = 0; kt <= tile; kt++) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous K, V (and Q) tiles
    stage_tile(ks, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 1); });
    stage_tile(vs, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 2); });
    __syncthreads();

    FragAcc acc[4];
    product<D, wmma::col_major>(acc, q, Transposed<D>{ks});  // S = Q K^T
    spill(scratch[warp], acc);
    __syncwarp();
    float tile_max = -INFINITY;
    float s[kHalfCols];
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const int64_t j = k0 + c0 + c;
      s[c] = (j <= i && j < a.seq) ? a.scale * scratch[warp][r][c0 + c] : -INFINITY;
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
      probs[warp][r][c0 + c] = stk::from_float<D>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * correction + sum;
    m = m_new;
    __syncwarp();

    // P V into the scratch, then O = O * correction + P V.
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.0f);
    accumulate<D>(acc, probs[warp], vs);
    spill(scratch[warp], acc);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) o[c] = o[c] * correction + scratch[warp][r][c0 + c];
    __syncwarp();
  }

  if (i >= a.seq) return;
  const int64_t out = out_at(a, hd, i);
#pragma unroll
  for (int c = 0; c < kHalfCols; c++) stk::store<D>(a.out_w, out + c0 + c, o[c] / l);
  if (c0 == 0) a.lse[(hd.b * a.heads + hd.h) * a.seq + i] = m + logf(l);
}

// ---------------------------------------------------------------------------------------------
// Backward: dK and dV per key tile.

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads) flash_dkv_kernel(FlashArgs a) {
  __shared__ __align__(128) BackwardShared sm;
  uint16_t(*qs)[kHead] = sm.a;
  uint16_t(*dos)[kHead] = sm.b;
  auto scratch = sm.scratch;
  auto ds = sm.ds;  // P^T, then dS^T
  const Head hd = head_of(a);
  const Place at = place_of();
  const int warp = at.warp, r = at.r, c0 = at.c0;
  const int64_t tile = at.tile, k0 = tile * kTile;
  const int64_t j = k0 + warp * kWarpRows + r;  // this lane's key

  // K and V through the Q and dO buffers into registers.
  stage_tile(qs, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 1); });
  stage_tile(dos, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 2); });
  __syncthreads();
  FragA<D> k[4], v[4];
  load_rows<D>(k, qs, warp);
  load_rows<D>(v, dos, warp);

  FragAcc dk[4], dv[4];
#pragma unroll
  for (int n = 0; n < 4; n++) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int64_t tiles = (a.seq + kTile - 1) / kTile;
  for (int64_t qt = tile; qt < tiles; qt++) {
    const int64_t q0 = qt * kTile;
    __syncthreads();
    stage_tile(qs, a.qkv, q0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 0); });
    stage_tile(dos, a.dout, q0, a.seq, [&](int64_t t) { return out_at(a, hd, t); });
    stage_lse(sm.lse, a, hd, q0);
    __syncthreads();
    row_dots<D>(sm.dots, dos, a, hd, q0);
    __syncthreads();

    FragAcc acc[4];
    product<D, wmma::col_major>(acc, k, Transposed<D>{qs});  // S^T = K Q^T
    spill(scratch[warp], acc);
    __syncwarp();
    float p[kHalfCols];
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const int64_t i = q0 + c0 + c;
      const bool seen = i >= j && i < a.seq && j < a.seq;
      p[c] = seen ? __expf(a.scale * scratch[warp][r][c0 + c] - sm.lse[c0 + c]) : 0.0f;
      ds[warp][r][c0 + c] = stk::from_float<D>(p[c]);
    }
    __syncwarp();
    accumulate<D>(dv, ds[warp], dos);                         // dV += P^T dO
    product<D, wmma::col_major>(acc, v, Transposed<D>{dos});  // dP^T = V dO^T
    __syncwarp();
    spill(scratch[warp], acc);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalfCols; c++)
      ds[warp][r][c0 + c] = stk::from_float<D>(p[c] * (scratch[warp][r][c0 + c] - sm.dots[c0 + c]));
    __syncwarp();
    accumulate<D>(dk, ds[warp], qs);  // dK += dS^T Q
  }
  const int64_t row0 = k0 + warp * kWarpRows;
  add_rows<D>(a, hd, row0, 1, a.scale, dk, scratch[warp]);
  add_rows<D>(a, hd, row0, 2, 1.0f, dv, scratch[warp]);
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ per query tile.

template <stk::Dt D>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(FlashArgs a) {
  __shared__ __align__(128) BackwardShared sm;
  uint16_t(*ks)[kHead] = sm.a;
  uint16_t(*vs)[kHead] = sm.b;
  auto scratch = sm.scratch;
  auto ds = sm.ds;
  const Head hd = head_of(a);
  const Place at = place_of();
  const int warp = at.warp, r = at.r, c0 = at.c0;
  const int64_t tile = at.tile, q0 = tile * kTile;
  const int64_t i = q0 + warp * kWarpRows + r;  // this lane's query

  // Q and dO through the K and V buffers into registers; D and lse of the tile's rows.
  stage_tile(ks, a.qkv, q0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 0); });
  stage_tile(vs, a.dout, q0, a.seq, [&](int64_t t) { return out_at(a, hd, t); });
  stage_lse(sm.lse, a, hd, q0);
  __syncthreads();
  row_dots<D>(sm.dots, vs, a, hd, q0);
  FragA<D> q[4], dout[4];
  load_rows<D>(q, ks, warp);
  load_rows<D>(dout, vs, warp);
  __syncthreads();
  const float row_lse = sm.lse[warp * kWarpRows + r], row_dot = sm.dots[warp * kWarpRows + r];

  FragAcc dq[4];
#pragma unroll
  for (int n = 0; n < 4; n++) wmma::fill_fragment(dq[n], 0.0f);
  for (int64_t kt = 0; kt <= tile; kt++) {
    const int64_t k0 = kt * kTile;
    __syncthreads();
    stage_tile(ks, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 1); });
    stage_tile(vs, a.qkv, k0, a.seq, [&](int64_t t) { return qkv_at(a, hd, t, 2); });
    __syncthreads();

    FragAcc acc[4];
    product<D, wmma::col_major>(acc, q, Transposed<D>{ks});  // S = Q K^T
    spill(scratch[warp], acc);
    __syncwarp();
    float p[kHalfCols];
#pragma unroll
    for (int c = 0; c < kHalfCols; c++) {
      const int64_t jj = k0 + c0 + c;
      const bool seen = jj <= i && jj < a.seq && i < a.seq;
      p[c] = seen ? __expf(a.scale * scratch[warp][r][c0 + c] - row_lse) : 0.0f;
    }
    __syncwarp();
    product<D, wmma::col_major>(acc, dout, Transposed<D>{vs});  // dP = dO V^T
    spill(scratch[warp], acc);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalfCols; c++)
      ds[warp][r][c0 + c] = stk::from_float<D>(p[c] * (scratch[warp][r][c0 + c] - row_dot));
    __syncwarp();
    accumulate<D>(dq, ds[warp], ks);  // dQ += dS K
  }
  add_rows<D>(a, hd, q0 + warp * kWarpRows, 0, a.scale, dq, scratch[warp]);
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
