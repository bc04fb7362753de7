// colsum.cu - deterministic sums over the rows of a [rows, cols] matrix: the bias gradient of a
// linear layer (optionally after the GELU derivative, applied in place), and the weight and bias
// gradients of a LayerNorm. Accumulated into the output (+=), in fp32, in an order fixed by
// (rows, cols) alone, with no atomics.
//
// Two launches:
//  1. colsum_partial, grid (ceil(cols / 32), chunks), block (32, 8): block (x, y) owns 32
//     adjacent columns (one warp reads 32 consecutive elements of a row: coalesced) and the rows
//     of chunk y; its 8 row lanes stride the chunk by 8 and each keeps fp32 sums, which lane
//     row 0 then adds up in row-lane order and writes to partials[y][col] in the context's
//     column-sum region. Splitting rows into chunks is what gives a tall, narrow matrix (32k
//     rows x 768 columns) enough blocks to fill the GPU.
//  2. colsum_finish, one thread per column: adds the chunks' partials in chunk order and adds
//     the total into the output (rounded to its dtype once). The outputs are parameter
//     gradients: in x's dtype, or fp32 beside 16-bit x (STK_DISPATCH_GRAD).
// The chunk count depends only on rows and cols (and the region's fixed size), never on the
// GPU, so the bits are the same on every run and every device.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kMinRowsPerChunk = 64;
constexpr int64_t kMaxChunks = 1024;

template <stk::Dt D, int MODE>
__global__ void colsum_partial(void *x, const void *aux, const float *mean, const float *rstd,
                               int64_t rows, int64_t cols, int64_t rows_per_chunk, int64_t chunks,
                               float *partials) {
  __shared__ float sum0[kRowLanes][kColTile + 1], sum1[kRowLanes][kColTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float s0 = 0.0f, s1 = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const int64_t i = r * cols + c;
      float v = stk::load<D>(x, i);
      if constexpr (MODE == CUDA_COLSUM_DGELU) {
        // The pre-activation's gradient, stored in place; the sum takes the stored (rounded)
        // value, the one the products that follow will read.
        const typename stk::Storage<D>::type g =
            stk::from_float<D>(v * stk::gelu_grad(stk::load<D>(aux, i)));
        static_cast<typename stk::Storage<D>::type *>(x)[i] = g;
        v = stk::to_float<D>(g);
        s0 += v;
      } else if constexpr (MODE == CUDA_COLSUM_LAYERNORM) {
        const float xhat = (stk::load<D>(aux, i) - mean[r]) * rstd[r];
        s0 += v * xhat;
        s1 += v;
      } else {
        s0 += v;
      }
    }
  }
  sum0[threadIdx.y][threadIdx.x] = s0;
  sum1[threadIdx.y][threadIdx.x] = s1;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t0 = 0.0f, t1 = 0.0f;
#pragma unroll
    for (int y = 0; y < kRowLanes; y++) {
      t0 += sum0[y][threadIdx.x];
      t1 += sum1[y][threadIdx.x];
    }
    partials[chunk * cols + c] = t0;
    if (MODE == CUDA_COLSUM_LAYERNORM) partials[(chunks + chunk) * cols + c] = t1;
  }
}

// out0[c] += sum over chunks of partials[k][c] (and out1 from the second plane), in chunk order;
// the outputs are of dtype G.
template <stk::Dt G>
__global__ void colsum_finish(const float *partials, int64_t chunks, int64_t cols, void *out0,
                              void *out1) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float t0 = 0.0f;
  for (int64_t k = 0; k < chunks; k++) t0 += partials[k * cols + c];
  if (out0) stk::store<G>(out0, c, stk::load<G>(out0, c) + t0);
  if (out1) {
    float t1 = 0.0f;
    for (int64_t k = 0; k < chunks; k++) t1 += partials[(chunks + k) * cols + c];
    stk::store<G>(out1, c, stk::load<G>(out1, c) + t1);
  }
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
  const dim3 grid((unsigned)((cols + kColTile - 1) / kColTile), (unsigned)chunks);
  const dim3 block(kColTile, kRowLanes);
  float *partials = cx->colsum_partials;
  STK_DISPATCH_GRAD(dtype, out_dtype, {
    switch (mode) {
      case CUDA_COLSUM_PLAIN:
        colsum_partial<DT, CUDA_COLSUM_PLAIN><<<grid, block, 0, s>>>(
            x, aux, mean, rstd, rows, cols, rows_per_chunk, chunks, partials);
        break;
      case CUDA_COLSUM_DGELU:
        colsum_partial<DT, CUDA_COLSUM_DGELU><<<grid, block, 0, s>>>(
            x, aux, mean, rstd, rows, cols, rows_per_chunk, chunks, partials);
        break;
      case CUDA_COLSUM_LAYERNORM:
        colsum_partial<DT, CUDA_COLSUM_LAYERNORM><<<grid, block, 0, s>>>(
            x, aux, mean, rstd, rows, cols, rows_per_chunk, chunks, partials);
        break;
    }
    ST_CHECK(stk::launched(op, "colsum_partial"));
    if (out0 || out1) {
      colsum_finish<GT>
          <<<stk::grid_for(cols, 256, 1 << 30), 256, 0, s>>>(partials, chunks, cols, out0, out1);
      ST_CHECK(stk::launched(op, "colsum_finish"));
    }
  });
  return ST_OK;
}
