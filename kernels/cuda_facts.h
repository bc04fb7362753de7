/* cuda_facts.h - what the CUDA kernel backend is, as far as it can be told without a GPU: the
 * dtypes its ops run on, the workspace its context holds (region by region, and which regions
 * ST_CUDA_ATTENTION adds), and the attention state it saves. Plain C compiled into every build,
 * CPU-only ones included, so `shardtrain plan` and `simulate` predict a GPU run the same way on
 * a login node without the CUDA toolkit as on the GPU machine (kernel_kind_* read
 * kernel_facts_cuda). The CUDA backend (kernels/cuda/) takes the same numbers from here: its
 * table's facts are kernel_facts_cuda, and its context allocates and carves exactly the layout
 * cuda_facts_workspace_layout gives, so the planner and the backend cannot disagree.
 *
 * No CUDA headers, nothing that runs on a GPU, no state: the answers depend on the arguments and
 * on ST_CUDA_ATTENTION alone, never on what the build or the machine has (a build without the
 * cuDNN attention still holds its region when asked for it, and runs the flash kernels). */
#ifndef ST_KERNELS_CUDA_FACTS_H
#define ST_KERNELS_CUDA_FACTS_H

#include <stddef.h>

#include "kernels/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of the workspace regions: 45 MiB of device memory per backend in all (301 MiB with the
 * cuDNN attention), plus 1 MiB of host staging for AdamW segments, all counted in the
 * allocator's workspace category. The sort region holds about 20 bytes per token: some 400k
 * tokens per embedding backward call. The cuDNN region holds a graph's workspace: d12 at 1024
 * tokens takes about 27 MiB per sequence there (the deterministic backward's T x T block per
 * head), so a batch of 16 runs in two chunks. */
#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's scratch (split-K, epilogues) */
#define CUDA_REDUCE_PARTIALS 1024                  /* doubles: block partials of sums */
#define CUDA_COLSUM_FLOATS ((size_t)1 << 20)       /* column-sum partials (bias, LayerNorm) */
#define CUDA_SEGMENT_CAPACITY 32768                /* AdamW segments passed through memory */
#define CUDA_SEGMENT_BYTES 32                      /* one segment as adamw.cu lays it out */
#define CUDA_SORT_BYTES ((size_t)8 << 20)          /* the embedding backward's token sort */
#define CUDA_CUDNN_BYTES ((size_t)256 << 20)       /* cuDNN attention (ST_CUDA_ATTENTION=cudnn) */

/* The attention kernels ST_CUDA_ATTENTION asks for (docs/ENVIRONMENT.md); each kind falls back
 * to the next where it does not take a shape: cudnn to flash, flash to simple. */
typedef enum cuda_attention_kind {
  CUDA_ATTENTION_SIMPLE = 0, /* attention.cu: a warp per row */
  CUDA_ATTENTION_FLASH = 1,  /* flash_attention.cu: tiles on the tensor cores */
  CUDA_ATTENTION_CUDNN = 2   /* cudnn_attention.cpp: cuDNN's fused attention */
} cuda_attention_kind;

/* The kind ST_CUDA_ATTENTION names, or -1 for a value that names none (the backend refuses to
 * start on it). */
int cuda_facts_attention_requested(void);

/* The regions of the device workspace, in their order in it. */
typedef enum cuda_region {
  CUDA_REGION_LT = 0,       /* cuBLASLt's scratch */
  CUDA_REGION_REDUCE = 1,   /* block partials of the sums (doubles) */
  CUDA_REGION_COLSUM = 2,   /* column-sum partials (floats) */
  CUDA_REGION_SEGMENTS = 3, /* a long AdamW segment list */
  CUDA_REGION_SORT = 4,     /* the embedding backward's sort */
  CUDA_REGION_CUDNN = 5,    /* the cuDNN attention's graph workspace */
  CUDA_REGION_COUNT = 6
} cuda_region;

typedef struct cuda_workspace_layout {
  size_t offset[CUDA_REGION_COUNT]; /* from the workspace's start, each 256-byte aligned */
  size_t bytes[CUDA_REGION_COUNT];  /* 0: the region does not exist */
  size_t device_bytes;              /* the one device allocation that holds them */
  size_t host_bytes;                /* the host staging of a long AdamW segment list */
} cuda_workspace_layout;

/* The workspace of a context running `attention`: the cuDNN region exists for
 * CUDA_ATTENTION_CUDNN only. */
cuda_workspace_layout cuda_facts_workspace_layout(cuda_attention_kind attention);

/* The CUDA backend's facts (backend_ops.h): every op of the vocabulary on fp32, bf16 and fp16
 * (the loss sum on fp32 alone), parameter gradients also in fp32 beside bf16 and fp16
 * activations; the workspace of the kind ST_CUDA_ATTENTION names now (an
 * unknown name: simple's, which the backend then refuses anyway); one fp32 log-sum-exp per
 * attention row saved; no attention scratch of its own (it lives in the workspace). */
extern const kernel_facts kernel_facts_cuda;

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_FACTS_H */
