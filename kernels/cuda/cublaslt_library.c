/* cublaslt_library.c - opens cuBLASLt at run time and finds the functions the CUDA backend calls
 * (cublaslt_library.h says why it is not linked). */
#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

#define CUBLASLT_STR(x) #x
#define CUBLASLT_XSTR(x) CUBLASLT_STR(x)
#define CUBLASLT_SONAME "libcublasLt.so." CUBLASLT_XSTR(CUBLAS_VER_MAJOR)

/* Process-wide, as the loaded library is: written once, under `once`, read-only afterwards. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static cuda_cublaslt_api api;
static char failure[768]; /* empty when api is complete */

static void *open_library(void) {
  void *handle = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle) return handle;
  const char *why = dlerror();
  snprintf(failure, sizeof failure, "%s", why ? why : "dlopen failed");
#ifdef ST_CUDA_LIB64
  handle = dlopen(ST_CUDA_LIB64 "/" CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle) {
    failure[0] = '\0';
  } else {
    /* Both reasons: the second may be the telling one (a library found but unusable). */
    why = dlerror();
    const size_t used = strlen(failure);
    snprintf(failure + used, sizeof failure - used, "; nor %s", why ? why : "dlopen failed");
  }
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

st_status cuda_cublaslt_open(const cuda_cublaslt_api **out) {
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
