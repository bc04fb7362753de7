// cublaslt.cc - cuda_emu's cuBLASLt (include/cublasLt.h) on the CPU: descriptors are plain
// structs, the heuristic validates the problem and answers one algorithm, and cublasLtMatmul is a
// triple loop run on its stream (cuda_emu_on_stream: at once, or later under CUDA_EMU_ASYNC=1).
//
// Semantics follow NVIDIA's cuBLASLt documentation, column-major: D = epilogue(alpha op(A) op(B)
// + beta C (+ bias)). Each dot product is accumulated in fp32 in k order from inputs converted
// exactly to fp32; 16-bit results are rounded to nearest even. The bias is a vector of m values
// of D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE unset); GELU is the tanh approximation; the
// GELU_AUX epilogues store the GELU input (after the bias) in D's type with leading dimension
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD. With beta == 0, C is not read.
//
// Checked like the real library: attribute sizes, layout leading dimensions, consistent
// dimensions (INVALID_VALUE), the supported type and epilogue combinations (NOT_SUPPORTED), the
// algorithm matching the descriptors it is run with, and the data pointers having the alignment
// the heuristic was promised (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256; for the
// epilogue's bias and aux, the alignment of the pointers set on the descriptor when the
// heuristic ran, which it reads from their values): on a GPU a misaligned pointer faults; here
// cublasLtMatmul prints why and returns EXECUTION_FAILED.
//
// Not emulated: compute types other than CUBLAS_COMPUTE_32F, scale types other than fp32, other
// epilogues, batches, layout attributes, pointer modes, split-K (the single algorithm never
// reduces, so any reduction-scheme mask admits it), workspaces (none is needed).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <string.h>

#include <cmath>
#include <cstdint>
#include <new>

struct cublasLtContext {
  int unused;
};

struct cublasLtMatrixLayoutOpaque_st {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

struct cublasLtMatmulDescOpaque_st {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
  int32_t bias_type;  // -1: D's type
  void *aux;
  int64_t aux_ld;
};

struct cublasLtMatmulPreferenceOpaque_st {
  uint64_t max_workspace;
  uint32_t reduction_mask;
  uint32_t align[4];  // A, B, C, D in bytes
};

namespace {

constexpr uint64_t kAlgoMagic = 0x454d554c54414c47ull;  // "EMULTALG"

// The 16-bit elements through the emulated toolkit's own types (cuda_fp16.h, cuda_bf16.h).
float fp16_to_float(uint16_t h) { return __half2float(__half{h}); }
uint16_t float_to_fp16(float f) { return __float2half(f).__x; }
float bf16_to_float(uint16_t h) { return __bfloat162float(__nv_bfloat16{h}); }
uint16_t float_to_bf16(float f) { return __float2bfloat16(f).__x; }

// ---- elements ----

bool element_type(int32_t type) {
  switch (type) {
    case CUDA_R_32F:
    case CUDA_R_64F:
    case CUDA_R_16F:
    case CUDA_R_8I:
    case CUDA_R_8U:
    case CUDA_R_32I:
    case CUDA_R_32U:
    case CUDA_R_16BF: return true;
    default: return false;
  }
}

// Element i of an array of `type` (fp32, fp16 or bf16: the only ones validate() lets through).
float load(const void *base, int32_t type, int64_t i) {
  switch (type) {
    case CUDA_R_16F: return fp16_to_float(static_cast<const uint16_t *>(base)[i]);
    case CUDA_R_16BF: return bf16_to_float(static_cast<const uint16_t *>(base)[i]);
    default: return static_cast<const float *>(base)[i];
  }
}

void store(void *base, int32_t type, int64_t i, float v) {
  switch (type) {
    case CUDA_R_16F: static_cast<uint16_t *>(base)[i] = float_to_fp16(v); break;
    case CUDA_R_16BF: static_cast<uint16_t *>(base)[i] = float_to_bf16(v); break;
    default: static_cast<float *>(base)[i] = v; break;
  }
}

float gelu(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

// ---- epilogues ----

bool epilogue_supported(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// ---- the problem ----

struct Problem {
  int64_t m, n, k;
  bool ta, tb;           // op(A) = A^T, op(B) = B^T
  int32_t ab_type;       // A and B
  int32_t cd_type;       // C, D and the aux matrix
  int32_t bias_type;     // the bias vector
  uint64_t fingerprint;  // what an algorithm found for this problem is bound to
};

// The checks cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul share: dimensions first
// (INVALID_VALUE), then what the emulation (and the real library) can run (NOT_SUPPORTED).
cublasStatus_t validate(const cublasLtMatmulDescOpaque_st *desc,
                        const cublasLtMatrixLayoutOpaque_st *a,
                        const cublasLtMatrixLayoutOpaque_st *b,
                        const cublasLtMatrixLayoutOpaque_st *c,
                        const cublasLtMatrixLayoutOpaque_st *d, Problem *p) {
  if (!desc || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
  p->ta = desc->transa != CUBLAS_OP_N;
  p->tb = desc->transb != CUBLAS_OP_N;
  // D is m x n; op(A) m x k, so A is m x k (N) or k x m (T); op(B) k x n.
  p->m = static_cast<int64_t>(d->rows);
  p->n = static_cast<int64_t>(d->cols);
  p->k = static_cast<int64_t>(p->ta ? a->rows : a->cols);
  const uint64_t a_m = p->ta ? a->cols : a->rows;
  const uint64_t b_k = p->tb ? b->cols : b->rows, b_n = p->tb ? b->rows : b->cols;
  if (c->rows != d->rows || c->cols != d->cols || a_m != d->rows || b_k != (uint64_t)p->k ||
      b_n != d->cols) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The GELU input matrix's leading dimension: a multiple of 8, no less than D's rows.
  if (has_aux(desc->epilogue) && (desc->aux_ld < p->m || desc->aux_ld % 8 != 0)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  p->ab_type = a->type;
  p->cd_type = d->type;
  const bool ab_ok = a->type == b->type &&
                     (a->type == CUDA_R_32F || a->type == CUDA_R_16F || a->type == CUDA_R_16BF);
  const bool cd_ok = c->type == d->type && (d->type == a->type || d->type == CUDA_R_32F);
  if (!ab_ok || !cd_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!epilogue_supported(desc->epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  p->bias_type = desc->bias_type < 0 ? d->type : desc->bias_type;
  if (has_bias(desc->epilogue) && p->bias_type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  p->fingerprint = static_cast<uint64_t>(p->ab_type) | static_cast<uint64_t>(p->cd_type) << 8 |
                   static_cast<uint64_t>(desc->epilogue) << 16 |
                   static_cast<uint64_t>(p->ta) << 48 | static_cast<uint64_t>(p->tb) << 49;
  return CUBLAS_STATUS_SUCCESS;
}

// Copies an attribute's value, which must be exactly sizeof(T) bytes.
template <class T>
cublasStatus_t set_value(T *field, const void *buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool aligned(const void *p, uint64_t alignment) {
  return alignment <= 1 || reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// The alignment the heuristic reads from a pointer it is given but never dereferences (the
// epilogue's bias and aux, per cublasLt.h): the largest power of two dividing it, up to 256.
uint64_t alignment_of_value(const void *p) {
  uint64_t align = 1;
  while (align < 256 && reinterpret_cast<uintptr_t>(p) % (align * 2) == 0) align *= 2;
  return align;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new (std::nothrow) cublasLtContext{};
  return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library or handle was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was passed";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the device does not support the operation";
    case CUBLAS_STATUS_MAPPING_ERROR: return "access to GPU memory failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the operation or configuration is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
  }
  return "unknown status";
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  if (!element_type(type) || ld < 1 || static_cast<uint64_t>(ld) < rows) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *matLayout = new (std::nothrow) cublasLtMatrixLayoutOpaque_st{type, rows, cols, ld};
  return *matLayout ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  if (!element_type(scaleType)) return CUBLAS_STATUS_INVALID_VALUE;
  switch (computeType) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC: break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
  cublasLtMatmulDescOpaque_st init{};
  init.compute = computeType;
  init.scale = scaleType;
  init.transa = CUBLAS_OP_N;
  init.transb = CUBLAS_OP_N;
  init.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  init.bias_type = -1;
  *matmulDesc = new (std::nothrow) cublasLtMatmulDescOpaque_st(init);
  return *matmulDesc ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t sizeInBytes) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulDescOpaque_st &d = *matmulDesc;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: {
      int32_t v;
      cublasStatus_t s = set_value(&v, buf, sizeInBytes);
      if (s == CUBLAS_STATUS_SUCCESS) d.compute = static_cast<cublasComputeType_t>(v);
      return s;
    }
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: {
      int32_t v;
      cublasStatus_t s = set_value(&v, buf, sizeInBytes);
      if (s != CUBLAS_STATUS_SUCCESS) return s;
      if (!element_type(v)) return CUBLAS_STATUS_INVALID_VALUE;
      d.scale = static_cast<cudaDataType_t>(v);
      return s;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t v;
      cublasStatus_t s = set_value(&v, buf, sizeInBytes);
      if (s != CUBLAS_STATUS_SUCCESS) return s;
      if (v != CUBLAS_OP_N && v != CUBLAS_OP_T && v != CUBLAS_OP_C) {
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d.transa : d.transb) = v;
      return s;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_value(&d.epilogue, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_value(&d.bias, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_value(&d.aux, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_value(&d.aux_ld, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
      int32_t v;
      cublasStatus_t s = set_value(&v, buf, sizeInBytes);
      if (s != CUBLAS_STATUS_SUCCESS) return s;
      if (v != -1 && !element_type(v)) return CUBLAS_STATUS_INVALID_VALUE;
      d.bias_type = v;
      return s;
    }
    default:
      // A real attribute the emulation does not model (or an unknown one).
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  // The documented defaults: no workspace, every reduction scheme, 256-byte alignment.
  *pref = new (std::nothrow)
      cublasLtMatmulPreferenceOpaque_st{0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}};
  return *pref ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set_value(&pref->max_workspace, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return set_value(&pref->reduction_mask, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return set_value(&pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf,
                       sizeInBytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!preference || !heuristicResultsArray || !returnAlgoCount || requestedAlgoCount <= 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returnAlgoCount = 0;
  Problem p;
  const cublasStatus_t status = validate(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  cublasLtMatmulHeuristicResult_t r;
  memset(&r, 0, sizeof r);
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = p.fingerprint;
  for (int i = 0; i < 4; i++) r.algo.data[2 + i] = preference->align[i];
  // The bias and aux pointers set on the descriptor now are the alignments the algorithm keeps.
  const uint32_t epilogue = operationDesc->epilogue;
  r.algo.data[6] = has_bias(epilogue) ? alignment_of_value(operationDesc->bias) : 1;
  r.algo.data[7] = has_aux(epilogue) ? alignment_of_value(operationDesc->aux) : 1;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  heuristicResultsArray[0] = r;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  (void)workspace;
  (void)workspaceSizeInBytes;  // the algorithm needs none
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  Problem p;
  const cublasStatus_t status = validate(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const uint32_t epilogue = computeDesc->epilogue;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float *>(alpha);  // the scale type is fp32
  const float be = *static_cast<const float *>(beta);
  if ((p.m > 0 && p.n > 0 && !D) || (p.m > 0 && p.k > 0 && !A) || (p.k > 0 && p.n > 0 && !B) ||
      (be != 0.0f && p.m > 0 && p.n > 0 && !C)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (has_bias(epilogue) && !computeDesc->bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (has_aux(epilogue) && !computeDesc->aux) return CUBLAS_STATUS_INVALID_VALUE;
  // In place (C == D) needs one layout for both.
  if (C == D && Cdesc->ld != Ddesc->ld) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo) {
    // An algorithm runs only the problem it was found for, and assumes the data pointers have
    // the alignments its preference promised.
    if (algo->data[0] != kAlgoMagic || algo->data[1] != p.fingerprint) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void *ptrs[6] = {A, B, be != 0.0f ? C : nullptr, D, computeDesc->bias, computeDesc->aux};
    static const char *const what[6] = {"matrix A", "matrix B", "matrix C",
                                        "matrix D", "the bias", "the aux matrix"};
    static const char *const promised[6] = {"CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES",
                                            "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES",
                                            "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES",
                                            "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES",
                                            "the bias pointer's own",
                                            "the aux pointer's own"};
    for (int i = 0; i < 6; i++) {
      if (ptrs[i] && !aligned(ptrs[i], algo->data[2 + i])) {
        fprintf(stderr,
                "cuda_emu cublasLtMatmul: %s at %p is not aligned to the %llu bytes promised to "
                "the heuristic (%s); a GPU would fault (misaligned address)\n",
                what[i], ptrs[i], static_cast<unsigned long long>(algo->data[2 + i]), promised[i]);
        return CUBLAS_STATUS_EXECUTION_FAILED;
      }
    }
  }
  // What the matmul reads of the host's (alpha, beta, the descriptors) is read now, at the call,
  // as cuBLASLt reads it: the host may change the descriptors before the stream runs it.
  const int32_t ab = p.ab_type, cd = p.cd_type, bias_type = p.bias_type;
  const int64_t lda = Adesc->ld, ldb = Bdesc->ld, ldc = Cdesc->ld, ldd = Ddesc->ld;
  const int64_t aux_ld = computeDesc->aux_ld;
  const void *bias = computeDesc->bias;
  void *aux = computeDesc->aux;
  cuda_emu_on_stream(stream, "cublasLtMatmul", [=] {
    for (int64_t j = 0; j < p.n; j++) {
      for (int64_t i = 0; i < p.m; i++) {
        float acc = 0.0f;
        for (int64_t l = 0; l < p.k; l++) {
          const float a = load(A, ab, p.ta ? l + i * lda : i + l * lda);  // op(A)[i, l]
          const float b = load(B, ab, p.tb ? j + l * ldb : l + j * ldb);  // op(B)[l, j]
          acc += a * b;
        }
        float x = al * acc;
        if (be != 0.0f) x += be * load(C, cd, i + j * ldc);
        if (has_bias(epilogue)) x += load(bias, bias_type, i);
        if (has_aux(epilogue)) store(aux, cd, i + j * aux_ld, x);
        if (has_gelu(epilogue)) x = gelu(x);
        store(D, cd, i + j * ldd, x);
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
