// embedding.cu - token + position embedding, forward and a deterministic backward.
//
// Forward, embedding_forward_kernel: thread per output element (grid-stride, 256 threads),
// out[r, c] = wte[tokens[r], c] + wpe[r % T, c]. A token outside [0, V) (the CPU checks ids; a
// kernel cannot return an error without a host wait) gives a NaN row, so a bad id shows in
// the loss instead of reading out of bounds.
//
// Backward, deterministic with no float atomics:
//  - dwpe: embedding_dwpe_kernel, thread per (t, c), sums dout[b, t, c] over b in order.
//  - dwte: the N row ids 0..N-1 are sorted by token with CUB's stable radix sort (keys = token
//    ids, all 32 bits so an out-of-range id cannot alias another; values = row ids), so equal
//    tokens become one run whose rows are in increasing order. embedding_dwte_kernel launches
//    one block per sorted position; only the block at the start of a run works: its threads
//    take columns and sum the run's dout rows in row order, then add into dwte[token] once.
//    Each dwte row is written by one block, in a fixed order: the same bits on every run.
//    Out-of-range ids are skipped. Scratch (sorted keys, row ids, CUB's temporary storage)
//    comes from the context's sort region.
// Both sums are fp32 and added once into the gradient, of dout's dtype or, beside 16-bit
// activations, fp32 (G, STK_DISPATCH_GRAD).
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

template <stk::Dt D>
__global__ void embedding_forward_kernel(void *out, const int32_t *tokens, const void *wte,
                                         const void *wpe, int64_t rows, int64_t seq,
                                         int64_t channels, int64_t vocab) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * channels;
       e += stride) {
    const int64_t r = e / channels, c = e % channels;
    const int32_t tok = tokens[r];
    const float v = tok >= 0 && tok < vocab ? stk::load<D>(wte, (int64_t)tok * channels + c) +
                                                  stk::load<D>(wpe, (r % seq) * channels + c)
                                            : __uint_as_float(0x7fc00000u);
    stk::store<D>(out, e, v);
  }
}

template <stk::Dt D, stk::Dt G>
__global__ void embedding_dwpe_kernel(void *dwpe, const void *dout, int64_t batch, int64_t seq,
                                      int64_t channels) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < seq * channels;
       e += stride) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; b++) sum += stk::load<D>(dout, b * seq * channels + e);
    stk::store<G>(dwpe, e, stk::load<G>(dwpe, e) + sum);
  }
}

__global__ void iota_kernel(int32_t *x, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] = (int32_t)i;
  }
}

template <stk::Dt D, stk::Dt G>
__global__ void embedding_dwte_kernel(void *dwte, const void *dout, const uint32_t *keys,
                                      const int32_t *rows_sorted, int64_t n, int64_t channels,
                                      int64_t vocab) {
  const int64_t p = blockIdx.x;
  const uint32_t tok = keys[p];
  if ((p > 0 && keys[p - 1] == tok) || tok >= (uint64_t)vocab) return;
  int64_t end = p + 1;
  while (end < n && keys[end] == tok) end++;
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    float sum = 0.0f;
    for (int64_t q = p; q < end; q++) sum += stk::load<D>(dout, rows_sorted[q] * channels + c);
    const int64_t i = (int64_t)tok * channels + c;
    stk::store<G>(dwte, i, stk::load<G>(dwte, i) + sum);
  }
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

extern "C" st_status cuda_embedding_forward(void *ctx, const st_tensor *out, const int32_t *tokens,
                                            const st_tensor *wte, const st_tensor *wpe,
                                            const st_stream *stream) {
  (void)ctx;
  const int64_t seq = out->shape[1], channels = out->shape[2], rows = kernel_rows(out);
  STK_DISPATCH_DT(
      out->dtype,
      (embedding_forward_kernel<DT>
       <<<stk::grid_for(rows * channels, 256), 256, 0, stk::stream_of(stream)>>>(
           out->data, tokens, wte->data, wpe->data, rows, seq, channels, wte->shape[0])));
  return stk::launched("embedding_forward", "embedding_forward_kernel");
}

extern "C" st_status cuda_embedding_backward(void *ctx, const st_tensor *dwte,
                                             const st_tensor *dwpe, const st_tensor *dout,
                                             const int32_t *tokens, const st_stream *stream) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  const int64_t batch = dout->shape[0], seq = dout->shape[1], channels = dout->shape[2];
  const int64_t n = batch * seq;
  const cudaStream_t s = stk::stream_of(stream);
  const char *op = "embedding_backward";
  if (n > INT32_MAX) {
    return st_error(ST_ERR_UNSUPPORTED, "%s: %lld tokens in one call (at most 2^31 - 1)", op,
                    (long long)n);
  }
  // Carve the sort region: sorted keys, row ids before and after, CUB's temporary storage.
  const size_t ids_bytes = align256((size_t)n * sizeof(int32_t));
  size_t temp_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      NULL, temp_bytes, reinterpret_cast<const uint32_t *>(tokens), (uint32_t *)NULL,
      (const int32_t *)NULL, (int32_t *)NULL, (int)n, 0, 32, s);
  if (err != cudaSuccess) {
    return st_error(ST_ERR_CUDA, "%s: sizing the token sort failed: %s", op,
                    cudaGetErrorString(err));
  }
  if (3 * ids_bytes + temp_bytes > CUDA_SORT_BYTES) {
    return st_error(ST_ERR_UNSUPPORTED,
                    "%s: sorting %lld tokens needs %zu bytes of scratch, the CUDA context's sort "
                    "region has %zu",
                    op, (long long)n, 3 * ids_bytes + temp_bytes, (size_t)CUDA_SORT_BYTES);
  }
  // Every refusal comes before the first launch: a refused call leaves both gradients as they were.
  STK_DISPATCH_GRAD(
      dout->dtype, dwpe->dtype,
      (embedding_dwpe_kernel<DT, GT><<<stk::grid_for(seq * channels, 256), 256, 0, s>>>(
          dwpe->data, dout->data, batch, seq, channels)));
  ST_CHECK(stk::launched(op, "embedding_dwpe_kernel"));
  char *at = static_cast<char *>(cx->sort_scratch);
  uint32_t *keys = reinterpret_cast<uint32_t *>(at);
  int32_t *rows_in = reinterpret_cast<int32_t *>(at + ids_bytes);
  int32_t *rows_sorted = reinterpret_cast<int32_t *>(at + 2 * ids_bytes);
  void *temp = at + 3 * ids_bytes;
  iota_kernel<<<stk::grid_for(n, 256), 256, 0, s>>>(rows_in, n);
  ST_CHECK(stk::launched(op, "iota_kernel"));
  err =
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, reinterpret_cast<const uint32_t *>(tokens),
                                      keys, rows_in, rows_sorted, (int)n, 0, 32, s);
  if (err != cudaSuccess) {
    return st_error(ST_ERR_CUDA, "%s: the token sort failed: %s", op, cudaGetErrorString(err));
  }
  STK_DISPATCH_GRAD(dout->dtype, dwte->dtype,
                    (embedding_dwte_kernel<DT, GT><<<(unsigned)n, 256, 0, s>>>(
                        dwte->data, dout->data, keys, rows_sorted, n, channels, dwte->shape[0])));
  return stk::launched(op, "embedding_dwte_kernel");
}
