/* backend.c - the CPU kernel backend's table: ops on host memory, synchronous, no context.
 * The CPU computes in fp32 only; bf16 and fp16 are storage formats there (casts, sums of
 * squares, loss scaling's scale and finite check, the gradients AdamW reads and the parameters it
 * writes), so a unit with bf16 or fp16 parameters
 * keeps fp32 compute copies on this backend. */
#include "kernels/cpu/cpu_ops.h"

static int cpu_supports(kernel_op op, st_dtype dtype) {
  switch (op) {
    case KERNEL_OP_CAST:
    case KERNEL_OP_SUM_SQUARES:
    case KERNEL_OP_SCALE:
    case KERNEL_OP_FINITE_CHECK:
    case KERNEL_OP_ADAMW: return 1;
    default: return dtype == ST_FP32;
  }
}

static const kernel_facts cpu_facts = {
    .supports = cpu_supports,
    .attention_state_numel = kernel_cpu_attention_state_numel,
    .attention_scratch_bytes = kernel_cpu_attention_scratch_bytes,
};

const kernel_ops kernel_ops_cpu = {
    .name = "cpu",
    .device = ST_DEVICE_CPU,
    .facts = &cpu_facts,
    .matmul_forward = kernel_cpu_matmul_forward,
    .matmul_backward = kernel_cpu_matmul_backward,
    .layernorm_forward = kernel_cpu_layernorm_forward,
    .layernorm_backward = kernel_cpu_layernorm_backward,
    .gelu_forward = kernel_cpu_gelu_forward,
    .gelu_backward = kernel_cpu_gelu_backward,
    .attention_forward = kernel_cpu_attention_forward,
    .attention_backward = kernel_cpu_attention_backward,
    .attention_cached_forward = kernel_cpu_attention_cached_forward,
    .residual_forward = kernel_cpu_residual_forward,
    .embedding_forward = kernel_cpu_embedding_forward,
    .embedding_backward = kernel_cpu_embedding_backward,
    .classifier = kernel_cpu_classifier,
    .cast = kernel_cpu_cast,
    .sum_squares = kernel_cpu_sum_squares,
    .sum = kernel_cpu_sum,
    .scale = kernel_cpu_scale,
    .finite_check = kernel_cpu_finite_check,
    .step_factors = kernel_cpu_step_factors,
    .adamw = kernel_cpu_adamw,
};
