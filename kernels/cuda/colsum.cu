// colsum.cu - deterministic sums over the rows of a [rows, cols] matrix: the bias gradient of a
// linear layer (optionally after the GELU derivative, applied in place), and the weight and bias
// gradients of a LayerNorm. Accumulated into the output (+=), in fp32, in an order fixed by
// (rows, cols) alone, with no atomics.
//
// Two launches:
//  1. colsum_partial, grid (ceil(cols / 32 P), chunks), block (32, 8): block (x, y) owns 32 P
//     adjacent columns, P = 8 when every row starts on a 16-byte boundary (each thread reads 8
//     columns with one 16-byte load: a warp reads 512 bytes of a row; the loads of two rows
//     are in flight at once) and 1 otherwise, and the rows of chunk y; its 8 row lanes stride
//     the chunk by 8 and each keeps fp32 sums, which lane row 0 then adds up in row-lane order
//     and writes to partials[y][col] in the context's column-sum region. Each column's order
//     of additions is the same for either P. Splitting rows into chunks is what gives a tall,
//     narrow matrix (32k rows x 768 columns) enough blocks to fill the GPU.
//  2. colsum_finish, grid ceil(cols / 32), block (32, 32): each column's partials are added by
//     32 threads, chunks strided among them, whose sums are then added in thread order; the
//     total goes into the output (rounded to its dtype once). The outputs are parameter
//     gradients: in x's dtype, or fp32 beside 16-bit x (STK_DISPATCH_GRAD).
// The chunk count depends only on rows and cols (and the region's fixed size), never on the
// GPU, so the bits are the same on every run and every device.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int kFinishLanes = 32;
constexpr int64_t kMinRowsPerChunk = 64;
constexpr int64_t kMaxChunks = 1024;

// Columns [c0, c0 + P) of row r: one 16-byte pack when P is 8 (the caller checked the
// alignment), else one element.
template <stk::Dt D, int P>
__device__ __forceinline__ void cols_load(float (&v)[P], const void *p, int64_t i) {
  if constexpr (P == stk::kPack) {
    stk::load_pack<D>(v, p, i);
  } else {
    v[0] = stk::load<D>(p, i);
  }
}

template <stk::Dt D, int P>
__device__ __forceinline__ void cols_store(void *p, int64_t i, const float (&v)[P]) {
  if constexpr (P == stk::kPack) {
    stk::store_pack<D>(p, i, v);
  } else {
    stk::store<D>(p, i, v[0]);
  }
}

// Thread (x, y) owns columns [c0, c0 + P) of its block's tile of 32 P columns, c0 = the tile's
// first + x P, and the rows y, y + 8, ... of chunk blockIdx.y; each of its columns is summed in
// that row order whatever P is, so the bits do not depend on the path.
template <stk::Dt D, int MODE, int P>
__global__ void colsum_partial(void *__restrict__ x, const void *__restrict__ aux,
                               const float *mean, const float *rstd, int64_t rows, int64_t cols,
                               int64_t rows_per_chunk, int64_t chunks, float *partials) {
  constexpr int kTile = kColTile * P;
  __shared__ float sum0[kRowLanes][kTile + 1], sum1[kRowLanes][kTile + 1];
  const int64_t c0 = (int64_t)blockIdx.x * kTile + (int64_t)threadIdx.x * P;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float s0[P] = {}, s1[P] = {};
  if (c0 < cols) {
#pragma unroll 2
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const int64_t i = r * cols + c0;
      float v[P];
      cols_load<D, P>(v, x, i);
      if constexpr (MODE == CUDA_COLSUM_DGELU) {
        // The pre-activation's gradient, stored in place; the sum takes the stored (rounded)
        // value, the one the products that follow will read.
        float pre[P];
        cols_load<D, P>(pre, aux, i);
#pragma unroll
        for (int e = 0; e < P; e++) {
          v[e] = stk::to_float<D>(stk::from_float<D>(v[e] * stk::gelu_grad(pre[e])));
          s0[e] += v[e];
        }
        cols_store<D, P>(x, i, v);
      } else if constexpr (MODE == CUDA_COLSUM_LAYERNORM) {
        float in[P];
        cols_load<D, P>(in, aux, i);
        const float m = mean[r], rs = rstd[r];
#pragma unroll
        for (int e = 0; e < P; e++) {
          s0[e] += v[e] * ((in[e] - m) * rs);
          s1[e] += v[e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < P; e++) s0[e] += v[e];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < P; e++) {
    sum0[threadIdx.y][threadIdx.x * P + e] = s0[e];
    sum1[threadIdx.y][threadIdx.x * P + e] = s1[e];
  }
  __syncthreads();
  if (threadIdx.y != 0 || c0 >= cols) return;
#pragma unroll
  for (int e = 0; e < P; e++) {
    float t0 = 0.0f, t1 = 0.0f;
#pragma unroll
    for (int y = 0; y < kRowLanes; y++) {
      t0 += sum0[y][threadIdx.x * P + e];
      t1 += sum1[y][threadIdx.x * P + e];
    }
    partials[chunk * cols + c0 + e] = t0;
    if (MODE == CUDA_COLSUM_LAYERNORM) partials[(chunks + chunk) * cols + c0 + e] = t1;
  }
}

// The partial sums of every chunk, P columns a thread.
template <stk::Dt D, int P>
void launch_partial(cuda_colsum_mode mode, unsigned chunks, void *x, const void *aux,
                    const float *mean, const float *rstd, int64_t rows, int64_t cols,
                    int64_t rows_per_chunk, float *partials, cudaStream_t s) {
  const dim3 grid((unsigned)((cols + kColTile * P - 1) / (kColTile * P)), chunks);
  const dim3 block(kColTile, kRowLanes);
  switch (mode) {
    case CUDA_COLSUM_PLAIN:
      colsum_partial<D, CUDA_COLSUM_PLAIN, P>
          <<<grid, block, 0, s>>>(x, aux, mean, rstd, rows, cols, rows_per_chunk, chunks, partials);
      break;
    case CUDA_COLSUM_DGELU:
      colsum_partial<D, CUDA_COLSUM_DGELU, P>
          <<<grid, block, 0, s>>>(x, aux, mean, rstd, rows, cols, rows_per_chunk, chunks, partials);
      break;
    case CUDA_COLSUM_LAYERNORM:
      colsum_partial<D, CUDA_COLSUM_LAYERNORM, P>
          <<<grid, block, 0, s>>>(x, aux, mean, rstd, rows, cols, rows_per_chunk, chunks, partials);
      break;
  }
}

// out0[c] += sum over chunks of partials[k][c] (and out1 from the second plane); the outputs
// are of dtype G. Block (32, kFinishLanes) owns 32 adjacent columns: lane row y adds chunks
// y, y + kFinishLanes, ... in order, then row 0 adds the lane rows' sums in row order. The
// order depends on (chunks, cols) alone. One thread a column adding all 256 chunks of a
// 16k-row matrix in turn waited for one L2 read after another (about 10 us a plane).
template <stk::Dt G>
__global__ void __launch_bounds__(kColTile *kFinishLanes)
    colsum_finish(const float *partials, int64_t chunks, int64_t cols, void *out0, void *out1) {
  __shared__ float sum0[kFinishLanes][kColTile + 1], sum1[kFinishLanes][kColTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kColTile + threadIdx.x;
  float s0 = 0.0f, s1 = 0.0f;
  if (c < cols) {
    for (int64_t k = threadIdx.y; k < chunks; k += kFinishLanes) {
      s0 += partials[k * cols + c];
      if (out1) s1 += partials[(chunks + k) * cols + c];
    }
  }
  sum0[threadIdx.y][threadIdx.x] = s0;
  sum1[threadIdx.y][threadIdx.x] = s1;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float t0 = 0.0f, t1 = 0.0f;
#pragma unroll
  for (int y = 0; y < kFinishLanes; y++) {
    t0 += sum0[y][threadIdx.x];
    t1 += sum1[y][threadIdx.x];
  }
  if (out0) stk::store<G>(out0, c, stk::load<G>(out0, c) + t0);
  if (out1) stk::store<G>(out1, c, stk::load<G>(out1, c) + t1);
}

// How many row chunks' partial sums of `cols` columns the context's region holds.
int64_t chunks_that_fit(cuda_colsum_mode mode, int64_t cols) {
  const int64_t planes = mode == CUDA_COLSUM_LAYERNORM ? 2 : 1;
  return (int64_t)CUDA_COLSUM_FLOATS / (cols * planes);
}

}  // namespace

extern "C" st_status cuda_colsum_check(const char *op, cuda_colsum_mode mode, int64_t cols) {
  if (chunks_that_fit(mode, cols) >= 1) return ST_OK;
  return st_error(ST_ERR_UNSUPPORTED,
                  "%s: a column sum over %lld columns needs more than the %zu floats of the "
                  "CUDA context's column-sum region",
                  op, (long long)cols, (size_t)CUDA_COLSUM_FLOATS);
}

extern "C" st_status cuda_colsum(void *ctx, const char *op, cuda_colsum_mode mode, st_dtype dtype,
                                 int64_t rows, int64_t cols, void *x, const void *aux,
                                 const float *mean, const float *rstd, st_dtype out_dtype,
                                 void *out0, void *out1, const st_stream *stream) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  ST_CHECK(cuda_colsum_check(op, mode, cols));
  const int64_t fit = chunks_that_fit(mode, cols);
  int64_t chunks = (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  if (chunks > fit) chunks = fit;
  if (chunks < 1) chunks = 1;
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const cudaStream_t s = stk::stream_of(stream);
  float *partials = cx->colsum_partials;
  // 16-byte packs of 8 columns where every row starts on a 16-byte boundary.
  const bool vec = cols % stk::kPack == 0 && stk::aligned16(x) && (!aux || stk::aligned16(aux));
  STK_DISPATCH_GRAD(dtype, out_dtype, {
    if (vec) {
      launch_partial<DT, stk::kPack>(mode, (unsigned)chunks, x, aux, mean, rstd, rows, cols,
                                     rows_per_chunk, partials, s);
    } else {
      launch_partial<DT, 1>(mode, (unsigned)chunks, x, aux, mean, rstd, rows, cols, rows_per_chunk,
                            partials, s);
    }
    ST_CHECK(stk::launched(op, "colsum_partial"));
    if (out0 || out1) {
      colsum_finish<GT>
          <<<(unsigned)((cols + kColTile - 1) / kColTile), dim3(kColTile, kFinishLanes), 0, s>>>(
              partials, chunks, cols, out0, out1);
      ST_CHECK(stk::launched(op, "colsum_finish"));
    }
  });
  return ST_OK;
}
