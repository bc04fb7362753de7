/* tensor.h - the tensor descriptor every op takes: dtype, shape, strides (in elements) and
 * the device the data lives on. A descriptor never owns its data. */
#ifndef ST_CORE_TENSOR_H
#define ST_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MAX_DIMS 4

typedef enum st_device_kind { ST_DEVICE_CPU = 0, ST_DEVICE_CUDA = 1 } st_device_kind;

typedef struct st_tensor {
  void *data;
  st_dtype dtype;
  st_device_kind device;
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  int64_t strides[ST_MAX_DIMS];
} st_tensor;

/* A contiguous (row-major) descriptor over `data`. Fails on ndim outside 1..ST_MAX_DIMS, a
 * negative extent, or extents whose byte count does not fit in int64. */
st_status tensor_make(st_tensor *out, void *data, st_dtype dtype, st_device_kind device, int ndim,
                      const int64_t *shape);

int64_t tensor_numel(const st_tensor *t);
size_t tensor_nbytes(const st_tensor *t);
int tensor_is_contiguous(const st_tensor *t);

/* "[2, 5, 12]" into buf (always terminated, cut short when buf is too small); returns buf. */
const char *tensor_shape_text(char *buf, size_t size, int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_TENSOR_H */
