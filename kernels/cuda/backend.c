/* backend.c - the CUDA kernel backend's table (CUDA builds only). Every op enqueues on the
 * given stream and returns; none synchronises or allocates. The ops live in the .cu files beside
 * this one behind cuda_ops.h; the context (cuBLASLt handle, workspace, matmul plan cache) is
 * context.h's; what the backend is (the dtypes it runs, its workspace, its attention state) is
 * kernels/cuda_facts.h's, which every build has, so the planner sees exactly this backend. */
#include "kernels/backend_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda_facts.h"

const kernel_ops kernel_ops_cuda = {
    .name = "cuda",
    .device = ST_DEVICE_CUDA,
    .facts = &kernel_facts_cuda,
    .context_create = cuda_context_create,
    .context_destroy = cuda_context_destroy,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .attention_kind = cuda_attention_kind_name,
    .attention_fallbacks = cuda_attention_fallbacks,
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
    .step_factors = cuda_step_factors,
    .adamw = cuda_adamw,
};
