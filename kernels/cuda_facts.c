/* cuda_facts.c - the CUDA backend's facts (cuda_facts.h), compiled into every build. */
#include "kernels/cuda_facts.h"

#include <string.h>

#include "core/env.h"

enum { REGION_ALIGN = 256 };

static size_t round_up(size_t x) { return (x + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN; }

int cuda_facts_attention_requested(void) {
  const char *kind = env_get_string(ENV_CUDA_ATTENTION);
  if (strcmp(kind, "simple") == 0) return CUDA_ATTENTION_SIMPLE;
  if (strcmp(kind, "flash") == 0) return CUDA_ATTENTION_FLASH;
  if (strcmp(kind, "cudnn") == 0) return CUDA_ATTENTION_CUDNN;
  return -1;
}

cuda_workspace_layout cuda_facts_workspace_layout(cuda_attention_kind attention) {
  cuda_workspace_layout l;
  memset(&l, 0, sizeof l);
  l.bytes[CUDA_REGION_LT] = CUDA_LT_WORKSPACE_BYTES;
  l.bytes[CUDA_REGION_REDUCE] = CUDA_REDUCE_PARTIALS * sizeof(double);
  l.bytes[CUDA_REGION_COLSUM] = CUDA_COLSUM_FLOATS * sizeof(float);
  l.bytes[CUDA_REGION_SEGMENTS] = (size_t)CUDA_SEGMENT_CAPACITY * CUDA_SEGMENT_BYTES;
  l.bytes[CUDA_REGION_SORT] = CUDA_SORT_BYTES;
  l.bytes[CUDA_REGION_CUDNN] = attention == CUDA_ATTENTION_CUDNN ? CUDA_CUDNN_BYTES : 0;
  size_t at = 0;
  for (int r = 0; r < CUDA_REGION_COUNT; r++) {
    l.offset[r] = at;
    at += round_up(l.bytes[r]);
  }
  l.device_bytes = at;
  l.host_bytes = (size_t)CUDA_SEGMENT_CAPACITY * CUDA_SEGMENT_BYTES;
  return l;
}

/* Every op runs on fp32, bf16 and fp16 (fp32 accumulation inside; the kernels are templated on
 * the element type, cuda/common.cuh, and matmuls are cuBLASLt's CUDA_R_16BF / CUDA_R_16F with
 * CUBLAS_COMPUTE_32F); the loss sum and the step's factors are fp32 (kernels.h). The kernels are
 * built for sm_90 only, and the context refuses an older GPU, so bf16 (sm_80+) is always there once
 * a backend is. */
static int supports(kernel_op op, st_dtype dtype) {
  if (op == KERNEL_OP_SUM || op == KERNEL_OP_STEP_FACTORS) return dtype == ST_FP32;
  return dtype == ST_FP32 || dtype == ST_BF16 || dtype == ST_FP16;
}

static uint64_t context_bytes(mem_kind where) {
  const int requested = cuda_facts_attention_requested();
  const cuda_workspace_layout l = cuda_facts_workspace_layout(
      requested < 0 ? CUDA_ATTENTION_SIMPLE : (cuda_attention_kind)requested);
  if (where == MEM_DEVICE) return l.device_bytes;
  return where == MEM_HOST ? l.host_bytes : 0;
}

/* Every kind saves the same log-sum-exp per (sequence, head, query row), so a forward of one
 * kind and a backward of another agree. */
static int64_t attention_state_numel(int64_t batch, int64_t n_head, int64_t seq) {
  return batch * n_head * seq;
}

const kernel_facts kernel_facts_cuda = {
    .supports = supports,
    /* cuBLASLt writes a weight's gradient from 16-bit A and B into an fp32 C/D; colsum.cu and
     * embedding.cu add their fp32 sums into fp32 (common.cuh's STK_DISPATCH_GRAD). */
    .fp32_param_grads = 1,
    .context_bytes = context_bytes,
    .attention_state_numel = attention_state_numel,
};
