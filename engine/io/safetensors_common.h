/* safetensors_common.h - what the safetensors reader and writer share and their callers need
 * not see: size arithmetic with overflow checks and the name ordering both sides sort by.
 */
#ifndef ST_ENGINE_IO_SAFETENSORS_COMMON_H
#define ST_ENGINE_IO_SAFETENSORS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "engine/io/safetensors.h"

/* Element count and byte size of a tensor. Returns 0 when a dimension is negative or the byte
 * size does not fit in 64 bits (a file claiming such a tensor is lying about something). */
int safetensors_shape_size(safetensors_dtype dtype, int ndim, const int64_t *shape, uint64_t *numel,
                           uint64_t *bytes);

/* qsort/bsearch comparator for arrays of structs whose first member is a `const char *` name
 * (safetensors_entry, safetensors_tensor, safetensors_metadata): byte order, as the reference
 * implementation sorts names. */
int safetensors_compare_names(const void *a, const void *b);

/* In such an array already sorted by name, the first name that occurs twice, or NULL. */
const char *safetensors_duplicate_name(const void *sorted, size_t count, size_t element_size);

#endif /* ST_ENGINE_IO_SAFETENSORS_COMMON_H */
