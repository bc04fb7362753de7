/* cublaslt_library.c - opens cuBLASLt at run time and finds the functions the CUDA backend calls
 * (cublaslt_library.h says why it is not linked). */
#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "core/error.h"

#define CUBLASLT_STR(x) #x
#define CUBLASLT_XSTR(x) CUBLASLT_STR(x)
#define CUBLASLT_SONAME "libcublasLt.so." CUBLASLT_XSTR(CUBLAS_VER_MAJOR)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cublaslt_api api;
static char failure[512]; /* empty when api is complete */

static void *open_library(void) {
  void *handle = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle) return handle;
  const char *why = dlerror();
  snprintf(failure, sizeof failure, "%s", why ? why : "dlopen failed");
#ifdef ST_CUDA_LIB64
  handle = dlopen(ST_CUDA_LIB64 "/" CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle) failure[0] = '\0';
#endif
  return handle;
}

/* *slot = the library's function `name`; 0, with the failure noted, where it has none. */
static int find(void *handle, const char *name, void **slot) {
  *slot = dlsym(handle, name);
  if (!*slot) snprintf(failure, sizeof failure, "%s has no function %s", CUBLASLT_SONAME, name);
  return *slot != NULL;
}

static void load(void) {
  void *handle = open_library();
  if (!handle) return;
#define CUBLASLT_FIND(name) \
  if (!find(handle, #name, (void **)&api.name)) return;
  CUBLASLT_FUNCTIONS(CUBLASLT_FIND)
#undef CUBLASLT_FIND
}

st_status cublaslt_library_open(const cublaslt_api **out) {
  *out = NULL;
  pthread_once(&once, load);
  if (failure[0]) {
    return st_error(ST_ERR_CUDA,
                    "cannot load cuBLASLt (%s): %s; put the CUDA toolkit's lib64 folder on "
                    "LD_LIBRARY_PATH",
                    CUBLASLT_SONAME, failure);
  }
  *out = &api;
  return ST_OK;
}
