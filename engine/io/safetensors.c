/* safetensors.c - the dtype table and the helpers the reader and the writer share. */
#include "engine/io/safetensors.h"

#include <stddef.h>
#include <string.h>

#include "engine/io/safetensors_common.h"

/* The name comparator reads each element's first member as its name. */
_Static_assert(offsetof(safetensors_entry, name) == 0, "name must lead safetensors_entry");
_Static_assert(offsetof(safetensors_tensor, name) == 0, "name must lead safetensors_tensor");
_Static_assert(offsetof(safetensors_metadata, key) == 0, "key must lead safetensors_metadata");

static const struct {
  const char *name;
  size_t size;
} dtype_table[SAFETENSORS_DTYPE_COUNT] = {
    [SAFETENSORS_BOOL] = {"BOOL", 1},       [SAFETENSORS_U8] = {"U8", 1},
    [SAFETENSORS_I8] = {"I8", 1},           [SAFETENSORS_F8_E5M2] = {"F8_E5M2", 1},
    [SAFETENSORS_F8_E4M3] = {"F8_E4M3", 1}, [SAFETENSORS_I16] = {"I16", 2},
    [SAFETENSORS_U16] = {"U16", 2},         [SAFETENSORS_F16] = {"F16", 2},
    [SAFETENSORS_BF16] = {"BF16", 2},       [SAFETENSORS_I32] = {"I32", 4},
    [SAFETENSORS_U32] = {"U32", 4},         [SAFETENSORS_F32] = {"F32", 4},
    [SAFETENSORS_F64] = {"F64", 8},         [SAFETENSORS_I64] = {"I64", 8},
    [SAFETENSORS_U64] = {"U64", 8},
};

const char *safetensors_dtype_name(safetensors_dtype dtype) {
  return (unsigned)dtype < SAFETENSORS_DTYPE_COUNT ? dtype_table[dtype].name : "invalid";
}

size_t safetensors_dtype_size(safetensors_dtype dtype) {
  return (unsigned)dtype < SAFETENSORS_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

int safetensors_shape_size(safetensors_dtype dtype, int ndim, const int64_t *shape, uint64_t *numel,
                           uint64_t *bytes) {
  int has_zero = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0) return 0;
    has_zero |= shape[d] == 0;
  }
  /* With a zero extent the product is zero even where a partial product would overflow. */
  uint64_t count = has_zero ? 0 : 1;
  for (int d = 0; d < ndim && count; d++) {
    if (__builtin_mul_overflow(count, (uint64_t)shape[d], &count)) return 0;
  }
  if (__builtin_mul_overflow(count, (uint64_t)safetensors_dtype_size(dtype), bytes)) return 0;
  *numel = count;
  return 1;
}

int safetensors_compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *safetensors_duplicate_name(const void *sorted, size_t count, size_t element_size) {
  const char *element = sorted;
  for (size_t i = 1; i < count; i++, element += element_size) {
    if (safetensors_compare_names(element, element + element_size) == 0) {
      return *(const char *const *)element;
    }
  }
  return NULL;
}
