/* backend.c - the CPU kernel backend's table: fp32 ops on host memory, synchronous. */
#include "kernels/cpu/cpu_ops.h"

const kernel_backend kernel_backend_cpu = {
    .name = "cpu",
    .device = ST_DEVICE_CPU,
    .compute_dtypes = 1u << ST_FP32,
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
    .crossentropy_forward = kernel_cpu_crossentropy_forward,
    .crossentropy_backward = kernel_cpu_crossentropy_backward,
    .cast = kernel_cpu_cast,
    .sum_squares = kernel_cpu_sum_squares,
};
