/* cublaslt_library.h - cuBLASLt opened with dlopen by the first CUDA context, never linked.
 *
 * Linked, libcublasLt.so.13 (541 MB, 376k relocations) cost every process of a CUDA build some
 * 0.13 s of CPU at start-up, GPU or not: `shardtrain --help`, `plan` on a login node, each rank
 * of a CPU run. Opened here, it costs only the runs that make a CUDA context, and a CUDA build
 * starts on a machine without cuBLASLt (where a GPU is usable, its context then fails, naming
 * the library; without one it trains on the CPU).
 *
 * The library is looked up as the loader would have found it when linked: by its soname
 * (LD_LIBRARY_PATH, ld.so.cache), then in the lib64 folder of the toolkit the build used
 * (ST_CUDA_LIB64, what Bazel's run path pointed into). Once loaded it stays loaded: the table
 * is the process's, as the library is, shared by every context.
 * Private to kernels/cuda/. */
#ifndef ST_KERNELS_CUDA_CUBLASLT_LIBRARY_H
#define ST_KERNELS_CUDA_CUBLASLT_LIBRARY_H

#include <cublasLt.h>

#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cuBLASLt functions the backend calls. */
#define CUBLASLT_FUNCTIONS(X)             \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)

/* Each member has the type of a pointer to the function cublasLt.h declares under its name. */
#ifdef __cplusplus
#define CUBLASLT_MEMBER(name) decltype(&name) name;
#else
#define CUBLASLT_MEMBER(name) __typeof__(&name) name;
#endif
typedef struct cuda_cublaslt_api {
  CUBLASLT_FUNCTIONS(CUBLASLT_MEMBER)
} cuda_cublaslt_api;
#undef CUBLASLT_MEMBER

/* The functions, the library opened on the first call (thread-safe). ST_ERR_CUDA naming the
 * library and the loader's reason when it cannot be opened or lacks a function; every later call
 * gives the same answer. */
st_status cuda_cublaslt_open(const cuda_cublaslt_api **out);

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_CUBLASLT_LIBRARY_H */
