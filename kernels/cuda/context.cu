// context.cu - creation and release of the CUDA backend's context (context.h) and its cache of
// cuBLASLt matmul plans. Host code only: no kernels here.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/context.h"

extern "C" {
#include "core/alloc.h"
#include "core/check_cuda.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
}

namespace {

void plan_release(const cuda_context *cx, cuda_matmul_plan *p) {
  if (p->c) cx->blas->cublasLtMatrixLayoutDestroy(p->c);
  if (p->b) cx->blas->cublasLtMatrixLayoutDestroy(p->b);
  if (p->a) cx->blas->cublasLtMatrixLayoutDestroy(p->a);
  if (p->desc) cx->blas->cublasLtMatmulDescDestroy(p->desc);
  memset(p, 0, sizeof *p);
}

// The key in words, for messages.
void key_text(char *buf, size_t size, const cuda_matmul_key *key);

cudaDataType_t cuda_type(int64_t dtype) {
  return dtype == ST_BF16 ? CUDA_R_16BF : dtype == ST_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

const char *epilogue_name(int64_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "bias";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "bias+gelu(aux)";
    default: return "other";
  }
}

// cuBLASLt's heuristic for the plan's descriptors and layouts, into *result. cublasLt.h documents
// two answers for "nothing here runs this": success with zero results, and
// CUBLAS_STATUS_NOT_SUPPORTED ("no heuristic function available for current configuration");
// and a result counts only where its own state is success. Each "none" comes back as *found = 0,
// so that the caller's fallbacks (any split-K scheme, then the GELU epilogue's two-step path)
// run instead of failing the op.
st_status heuristic(const cuda_context *cx, const cuda_matmul_plan *p,
                    cublasLtMatmulPreference_t pref, const char *op,
                    cublasLtMatmulHeuristicResult_t *result, int *found) {
  *found = 0;
  const cublasStatus_t status = cx->blas->cublasLtMatmulAlgoGetHeuristic(
      cx->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, result, found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED ||
      (status == CUBLAS_STATUS_SUCCESS && *found > 0 && result->state != CUBLAS_STATUS_SUCCESS)) {
    *found = 0;
    return ST_OK;
  }
  return cuda_lt_status(cx, status, op, "cublasLtMatmulAlgoGetHeuristic");
}

#define LT_TRY(function, ...)                                        \
  do {                                                               \
    cublasStatus_t lt_try_status_ = cx->blas->function(__VA_ARGS__); \
    if (lt_try_status_ != CUBLAS_STATUS_SUCCESS) {                   \
      status = cuda_lt_status(cx, lt_try_status_, op, #function);    \
      goto fail;                                                     \
    }                                                                \
  } while (0)

// Descriptors, layouts and the heuristic's first choice for `key`, into *p. The heuristic reads
// the bias and aux pointers' alignment from their values (cublasLt.h), and the plan serves every
// call of its key: so it is shown pointers of exactly the key's (capped) alignments, never the
// first call's, which may be aligned further than a later call's; each call sets its own.
st_status plan_make(cuda_context *cx, const cuda_matmul_key *key, const char *op,
                    cuda_matmul_plan *p) {
  st_status status = ST_OK;
  cublasLtMatmulPreference_t pref = NULL;
  memset(p, 0, sizeof *p);
  p->key = *key;
  const cudaDataType_t type = cuda_type(key->dtype);
  const cublasOperation_t ta = (cublasOperation_t)key->transa, tb = (cublasOperation_t)key->transb;
  const cublasLtEpilogue_t epilogue = (cublasLtEpilogue_t)key->epilogue;
  const void *bias = reinterpret_cast<const void *>(static_cast<uintptr_t>(key->align[3]));
  void *aux = reinterpret_cast<void *>(static_cast<uintptr_t>(key->align[4]));
  // fp32 stays fp32 (no TF32): the CPU reference and the fp32 tests expect fp32 rounding.
  LT_TRY(cublasLtMatmulDescCreate, &p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  LT_TRY(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  LT_TRY(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  LT_TRY(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
         sizeof epilogue);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    // The bias has D's type, cuBLASLt's default (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE unset).
    LT_TRY(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
           sizeof bias);
  }
  if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    const int64_t ld = key->aux_ld;
    LT_TRY(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
           sizeof ld);
    LT_TRY(cublasLtMatmulDescSetAttribute, p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
           sizeof aux);
  }
  // The stored shapes: op(A) is m x k, so A is m x k (N) or k x m (T); likewise B.
  LT_TRY(cublasLtMatrixLayoutCreate, &p->a, type, ta == CUBLAS_OP_N ? key->m : key->k,
         ta == CUBLAS_OP_N ? key->k : key->m, key->lda);
  LT_TRY(cublasLtMatrixLayoutCreate, &p->b, type, tb == CUBLAS_OP_N ? key->k : key->n,
         tb == CUBLAS_OP_N ? key->n : key->k, key->ldb);
  // C and D may be fp32 beside 16-bit A and B (CUBLAS_COMPUTE_32F with an fp32 scale takes
  // CUDA_R_16BF or CUDA_R_16F inputs with a CUDA_R_32F output): a weight's gradient accumulated
  // into fp32 (beta = 1), never rounded to 16 bits.
  LT_TRY(cublasLtMatrixLayoutCreate, &p->c, cuda_type(key->d_dtype), key->m, key->n, key->ldc);

  {
    LT_TRY(cublasLtMatmulPreferenceCreate, &pref);
    const size_t ws = CUDA_LT_WORKSPACE_BYTES;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           &ws, sizeof ws);
    // Split-K partial sums only in fp32 (never added up in bf16): the output type's precision
    // would be lost for long k.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
           &schemes, sizeof schemes);
    const cublasLtMatmulPreferenceAttributes_t aligns[3] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES};
    for (int i = 0; i < 3; i++) {
      const uint32_t a = (uint32_t)key->align[i];
      LT_TRY(cublasLtMatmulPreferenceSetAttribute, pref, aligns[i], &a, sizeof a);
    }
    const uint32_t d_align = (uint32_t)key->align[2];
    LT_TRY(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
           &d_align, sizeof d_align);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    ST_CHECK_GOTO(heuristic(cx, p, pref, op, &result, &found), status, fail);
    if (found < 1) {
      // The fp32-only split-K preference is one of precision, not correctness (every scheme is
      // deterministic): without an algorithm under it, any scheme will do.
      const uint32_t any = CUBLASLT_REDUCTION_SCHEME_MASK;
      LT_TRY(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
             &any, sizeof any);
      ST_CHECK_GOTO(heuristic(cx, p, pref, op, &result, &found), status, fail);
    }
    if (found < 1) {
      // Remembered, so the heuristic is asked once and the warning printed once per key.
      char text[256];
      key_text(text, sizeof text, key);
      st_log(ST_LOG_WARN, "%s: cuBLASLt has no algorithm for %s", op, text);
      cx->blas->cublasLtMatmulPreferenceDestroy(pref);
      plan_release(cx, p);
      p->key = *key;
      p->used = 1;
      p->missing = 1;
      return st_error(ST_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for %s", op, text);
    }
    p->algo = result.algo;
  }
  cx->blas->cublasLtMatmulPreferenceDestroy(pref);
  p->used = 1;
  return ST_OK;

fail:
  if (pref) cx->blas->cublasLtMatmulPreferenceDestroy(pref);
  plan_release(cx, p);
  return status;
}

void key_text(char *buf, size_t size, const cuda_matmul_key *key) {
  snprintf(buf, size,
           "%s (C/D %s) m=%lld n=%lld k=%lld op(A)=%c op(B)=%c lda=%lld ldb=%lld ldc=%lld "
           "epilogue %s (alignments A %lld, B %lld, C/D %lld, bias %lld, aux %lld bytes)",
           dtype_name((st_dtype)key->dtype), dtype_name((st_dtype)key->d_dtype), (long long)key->m,
           (long long)key->n, (long long)key->k, key->transa == CUBLAS_OP_N ? 'N' : 'T',
           key->transb == CUBLAS_OP_N ? 'N' : 'T', (long long)key->lda, (long long)key->ldb,
           (long long)key->ldc, epilogue_name(key->epilogue), (long long)key->align[0],
           (long long)key->align[1], (long long)key->align[2], (long long)key->align[3],
           (long long)key->align[4]);
}

}  // namespace

extern "C" st_status cuda_lt_status(const cuda_context *cx, cublasStatus_t status, const char *op,
                                    const char *call) {
  if (status == CUBLAS_STATUS_SUCCESS) return ST_OK;
  return st_error(ST_ERR_CUDA, "%s: %s failed: %s (%s)", op, call,
                  cx->blas->cublasLtGetStatusName(status),
                  cx->blas->cublasLtGetStatusString(status));
}

extern "C" st_status cuda_matmul_plan_get(cuda_context *cx, const cuda_matmul_key *key,
                                          const char *op, cuda_matmul_plan **out) {
  for (int i = 0; i < CUDA_MATMUL_PLANS; i++) {
    cuda_matmul_plan *p = &cx->plans[i];
    if (p->used && memcmp(&p->key, key, sizeof *key) == 0) {
      if (p->missing) {
        char text[256];
        key_text(text, sizeof text, key);
        return st_error(ST_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for %s", op, text);
      }
      *out = p;
      return ST_OK;
    }
  }
  // A free slot, else the next victim in turn (a step's matmuls are far fewer than the cache).
  cuda_matmul_plan *slot = NULL;
  for (int i = 0; i < CUDA_MATMUL_PLANS && !slot; i++) {
    if (!cx->plans[i].used) slot = &cx->plans[i];
  }
  if (!slot) {
    slot = &cx->plans[cx->next_victim];
    cx->next_victim = (cx->next_victim + 1) % CUDA_MATMUL_PLANS;
    plan_release(cx, slot);
  }
  ST_CHECK(plan_make(cx, key, op, slot));
  *out = slot;
  return ST_OK;
}

extern "C" void cuda_context_destroy(void *ctx) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  if (!cx) return;
  cuda_cudnn_attention_destroy(cx->cudnn);
  if (cx->blas) {
    for (int i = 0; i < CUDA_MATMUL_PLANS; i++) plan_release(cx, &cx->plans[i]);
    if (cx->lt) cx->blas->cublasLtDestroy(cx->lt);
  }
  mem_free(cx->segments_host);
  mem_free(cx->workspace);
  mem_free(cx);
}

extern "C" st_status cuda_context_create(const st_device *dev, void **ctx) {
  *ctx = NULL;
  ST_CHECK(device_bind(dev));
  int major = 0, minor = 0, sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev->ordinal));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev->ordinal));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev->ordinal));
  if (major < 9) {
    // The kernels are compiled for sm_90 only (SASS + compute_90 PTX, third_party/cuda/cuda.bzl):
    // an older GPU could load none of them.
    return st_error(ST_ERR_UNSUPPORTED,
                    "CUDA kernels are built for compute capability 9.0; GPU %d is %d.%d",
                    dev->ordinal, major, minor);
  }
  // A misspelt kernel choice is refused, not run as the default.
  const int attention = cuda_facts_attention_requested();
  if (attention < 0) {
    return st_error(ST_ERR_INVALID_ARG, "ST_CUDA_ATTENTION '%s' is not simple, flash or cudnn",
                    env_get_string(ENV_CUDA_ATTENTION));
  }
  // The library first: without it nothing below is worth allocating.
  const cuda_cublaslt_api *blas = NULL;
  ST_CHECK(cuda_cublaslt_open(&blas));
  cuda_context *cx = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&cx, sizeof *cx, MEM_HOST, MEM_WORKSPACE, NULL));
  cx->blas = blas;
  cx->device = *dev;
  cx->sm_count = sms;
  cx->attention = (cuda_attention_kind)attention;
  st_status status = ST_OK;
  // Exactly the facts' layout: the bytes kernel_kind_workspace_bytes gives the planner.
  const cuda_workspace_layout layout = cuda_facts_workspace_layout(cx->attention);
  ST_CHECK_GOTO(mem_alloc(&cx->workspace, layout.device_bytes, MEM_DEVICE, MEM_WORKSPACE, dev),
                status, fail);
  ST_CHECK_GOTO(mem_alloc(&cx->segments_host, layout.host_bytes, MEM_HOST, MEM_WORKSPACE, NULL),
                status, fail);
  {
    char *base = static_cast<char *>(cx->workspace);
    cx->lt_workspace = base + layout.offset[CUDA_REGION_LT];
    cx->reduce_partials = reinterpret_cast<double *>(base + layout.offset[CUDA_REGION_REDUCE]);
    cx->colsum_partials = reinterpret_cast<float *>(base + layout.offset[CUDA_REGION_COLSUM]);
    cx->segments = base + layout.offset[CUDA_REGION_SEGMENTS];
    cx->sort_scratch = base + layout.offset[CUDA_REGION_SORT];
    cx->cudnn_region =
        layout.bytes[CUDA_REGION_CUDNN] ? base + layout.offset[CUDA_REGION_CUDNN] : NULL;
  }
  {
    cublasStatus_t lt = cx->blas->cublasLtCreate(&cx->lt);
    if (lt != CUBLAS_STATUS_SUCCESS) {
      cx->lt = NULL;
      status = cuda_lt_status(cx, lt, "cuda_context_create", "cublasLtCreate");
      goto fail;
    }
  }
  if (cx->attention == CUDA_ATTENTION_CUDNN) {
    st_error_saved before;
    st_error_save(&before);
    status = cuda_cudnn_attention_create(&cx->cudnn, 10 * major + minor, cx->cudnn_region,
                                         layout.bytes[CUDA_REGION_CUDNN]);
    if (status == ST_ERR_UNSUPPORTED) {
      // No cuDNN here (or none in this build): the run goes on with the next kind, and the
      // program's last error is what it was. Only a user who asked for cuDNN is warned; the
      // default says so at info level.
      st_log(env_lookup(ENV_CUDA_ATTENTION) ? ST_LOG_WARN : ST_LOG_INFO,
             "ST_CUDA_ATTENTION=cudnn: %s; the flash attention kernels run instead",
             st_last_error());
      st_error_restore(&before);
      cx->attention = CUDA_ATTENTION_FLASH;
      status = ST_OK;
    }
    if (status != ST_OK) goto fail;
  }
  *ctx = cx;
  return ST_OK;

fail:
  cuda_context_destroy(cx);
  return status;
}
