/* backend.c - the CUDA kernel backend's table (CUDA builds only). Every op enqueues on the
 * given stream and returns; none synchronises. The ops live in the .cu files beside this one,
 * behind the extern "C" launchers of their headers. */
#include "kernels/backend_ops.h"
#include "kernels/cuda/cast.h"

static int cuda_supports(kernel_op op, st_dtype dtype) {
  return op == KERNEL_OP_CAST && dtype == ST_BF16;
}

static st_status cuda_cast(void *ctx, const st_tensor *dst, const st_tensor *src,
                           const st_stream *stream) {
  (void)ctx;
  const size_t n = (size_t)tensor_numel(src);
  if (src->dtype == ST_FP32) return cuda_cast_f32_to_bf16(dst->data, src->data, n, stream->handle);
  return cuda_cast_bf16_to_f32(dst->data, src->data, n, stream->handle);
}

const kernel_ops kernel_ops_cuda = {
    .name = "cuda",
    .device = ST_DEVICE_CUDA,
    .supports = cuda_supports,
    .cast = cuda_cast,
};
