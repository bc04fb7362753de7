/* context.h - the CUDA kernel backend's context: what one backend object owns on its GPU.
 *
 * - cuBLASLt's functions (opened at run time: cublaslt_library.h), its handle and the matmul plans
 * (operation descriptor, matrix layouts and the heuristic's algorithm) cached per (shape, dtype,
 * epilogue, transposes, leading dimensions, pointer alignments), so a training step asks cuBLASLt's
 * heuristic once per distinct matmul.
 * - One device workspace (allocator category MEM_WORKSPACE), carved into fixed regions, one per
 *   family of ops, exactly as kernels/cuda_facts.h lays them out (the sizes the memory planner
 *   counts, in every build), so that no op allocates (cudaMalloc synchronises the device) and ops
 * of different families may overlap on different streams. Two ops of the SAME family must not run
 * concurrently on two streams of one backend (the engine runs them on its compute stream): they
 * would share their region.
 *
 * - The attention kind ST_CUDA_ATTENTION chose, and for cuDNN's its state (handle, graphs) and
 *   a region of its own, which exists whenever that kind is asked for: also where it then falls
 *   back to flash (no libcudnn, or a build without the cuDNN frontend), since the workspace is
 *   a function of the environment alone, which the planner sees too.
 *
 * There is no global state: everything lives here, made by cuda_context_create for one device
 * (bound with cudaSetDevice) and released by cuda_context_destroy (cuDNN's library, once
 * loaded, stays loaded: cudnn_attention.cpp). Private to kernels/cuda/. */
#ifndef ST_KERNELS_CUDA_CONTEXT_H
#define ST_KERNELS_CUDA_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda_facts.h"
#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_MATMUL_PLANS 64 /* cached matmul plans */

/* Everything that identifies a cuBLASLt matmul plan; all int64 so that memcmp sees no
 * padding. */
typedef struct cuda_matmul_key {
  int64_t m, n, k;        /* D[m, n] = op(A)[m, k] op(B)[k, n], column-major */
  int64_t transa, transb; /* CUBLAS_OP_N / CUBLAS_OP_T */
  int64_t lda, ldb, ldc;  /* leading dimensions of the stored matrices */
  int64_t dtype;          /* st_dtype of A, B and the bias */
  int64_t d_dtype;        /* st_dtype of C and D: dtype, or fp32 (a 16-bit weight's gradient) */
  int64_t epilogue;       /* cublasLtEpilogue_t */
  int64_t aux_ld;         /* pre-GELU leading dimension (GELU_AUX_BIAS), else 0 */
  int64_t align[5];       /* alignment in bytes (capped at 16) of A, B, C/D, bias, aux */
} cuda_matmul_key;

typedef struct cuda_matmul_plan {
  cuda_matmul_key key;
  int used;
  int missing; /* the heuristic found no algorithm for this key: remembered, asked once */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c; /* c serves C and D (same matrix) */
  cublasLtMatmulAlgo_t algo;
} cuda_matmul_plan;

typedef struct cuda_context {
  st_device device;
  int sm_count;
  const cuda_cublaslt_api *blas; /* cuBLASLt's functions */
  cublasLtHandle_t lt;
  void *workspace; /* one allocation, carved below */
  void *lt_workspace;
  double *reduce_partials;
  float *colsum_partials;
  void *segments;      /* device copy of a long AdamW segment list */
  void *segments_host; /* its host staging, CUDA_SEGMENT_CAPACITY entries */
  void *sort_scratch;
  cuda_matmul_plan plans[CUDA_MATMUL_PLANS];
  int next_victim; /* the plan replaced when the cache is full, round robin */
  cuda_attention_kind attention;
  void *cudnn_region;          /* the workspace's CUDA_REGION_CUDNN, or NULL */
  cuda_cudnn_attention *cudnn; /* with attention CUDA_ATTENTION_CUDNN: its state, else NULL */
  int64_t attention_fallbacks; /* attention calls the kind's kernels left to another kind */
} cuda_context;

st_status cuda_context_create(const st_device *dev, void **ctx);
void cuda_context_destroy(void *ctx);

/* The plan for `key`, from the cache or made now (descriptors, layouts, heuristic), for any
 * call of that key: the caller sets the epilogue's bias and pre-GELU pointers on its descriptor
 * before each matmul. `op` names the calling op in messages. ST_ERR_UNSUPPORTED when cuBLASLt
 * has no algorithm for the key (logged as a warning the first time; the answer is cached). */
st_status cuda_matmul_plan_get(cuda_context *cx, const cuda_matmul_key *key, const char *op,
                               cuda_matmul_plan **out);

/* ST_ERR_CUDA naming the op, the cuBLASLt call and its status when status is not success. */
st_status cuda_lt_status(const cuda_context *cx, cublasStatus_t status, const char *op,
                         const char *call);

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_CONTEXT_H */
