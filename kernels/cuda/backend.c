/* backend.c - the CUDA kernel backend's table (CUDA builds only). Every op enqueues on the
 * given stream and returns; none synchronises or allocates. The ops live in the .cu files beside
 * this one behind cuda_ops.h; the context (cuBLASLt handle, workspace, matmul plan cache) is
 * context.h's. */
#include "kernels/backend_ops.h"
#include "kernels/cuda/cuda_ops.h"

/* Every op runs on fp32, bf16 and fp16 (fp32 accumulation inside; the kernels are templated on
 * the element type, common.cuh, and matmuls are cuBLASLt's CUDA_R_16BF / CUDA_R_16F with
 * CUBLAS_COMPUTE_32F); the loss sum is fp32 (kernels.h). The kernels are built for sm_90 only,
 * and cuda_context_create refuses an older GPU, so bf16 (sm_80+) is always available once a
 * backend exists. */
static int cuda_supports(kernel_op op, st_dtype dtype) {
  if (op == KERNEL_OP_SUM) return dtype == ST_FP32;
  return dtype == ST_FP32 || dtype == ST_BF16 || dtype == ST_FP16;
}

const kernel_ops kernel_ops_cuda = {
    .name = "cuda",
    .device = ST_DEVICE_CUDA,
    .context_create = cuda_context_create,
    .context_destroy = cuda_context_destroy,
    .context_bytes = cuda_context_bytes,
    .supports = cuda_supports,
    /* Parameter gradients in fp32 beside 16-bit activations: cuBLASLt writes the weight's from
     * 16-bit A and B into an fp32 C/D, colsum.cu and embedding.cu add their fp32 sums into fp32
     * (STK_DISPATCH_GRAD). */
    .fp32_param_grads = 1,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .attention_state_numel = cuda_attention_state_numel,
    .attention_kind = cuda_attention_kind_name,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_cached_forward = cuda_attention_cached_forward,
    .residual_forward = cuda_residual_forward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .classifier = cuda_classifier,
    .cast = cuda_cast,
    .scale = cuda_scale,
    .sum_squares = cuda_sum_squares,
    .sum = cuda_sum,
    .finite_check = cuda_finite_check,
    .adamw = cuda_adamw,
};
