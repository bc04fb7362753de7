/* cuBLASLt is opened at run time, never linked (kernels/cuda/cublaslt_library.h): this program,
 * linked with the whole kernel backend, CUDA's included, has no libcublasLt mapped until
 * cuda_cublaslt_open, which then finds every function the backend calls (each a callable
 * entry: the status names answer without a GPU) and gives the same table on a second call.
 * CUDA builds only; it needs no GPU. */
#include "kernels/cuda/cublaslt_library.h"

#include <stdio.h>
#include <string.h>

#include "tests/testing.h"

/* 1 when a file whose name holds "libcublasLt" is mapped into this process. */
static int cublaslt_mapped(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return -1;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, maps)) found = strstr(line, "libcublasLt") != NULL;
  fclose(maps);
  return found;
}

int main(void) {
  CHECK_EQ_INT(cublaslt_mapped(), 0);
  const cuda_cublaslt_api *api = NULL;
  const st_status status = cuda_cublaslt_open(&api);
  CHECK_MSG(status == ST_OK, "cuda_cublaslt_open: %s", st_last_error());
  if (!api) return test_finish("cublaslt_library_test");
  CHECK_EQ_INT(cublaslt_mapped(), 1);
#define CHECK_FOUND(name) CHECK_MSG(api->name != NULL, "%s not found", #name);
  CUBLASLT_FUNCTIONS(CHECK_FOUND)
#undef CHECK_FOUND
  const char *name = api->cublasLtGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK_MSG(name && strcmp(name, "CUBLAS_STATUS_NOT_INITIALIZED") == 0, "status name '%s'",
            name ? name : "(null)");
  const cuda_cublaslt_api *again = NULL;
  CHECK_EQ_INT(cuda_cublaslt_open(&again), ST_OK);
  CHECK(again == api);
  return test_finish("cublaslt_library_test");
}
