/* tensor.c - descriptor construction and queries. */
#include "core/tensor.h"

#include <stdio.h>

#include "core/error.h"

st_status tensor_make(st_tensor *out, void *data, st_dtype dtype, st_device_kind device, int ndim,
                      const int64_t *shape) {
  if (ndim < 1 || ndim > ST_MAX_DIMS) {
    return st_error(ST_ERR_INVALID_ARG, "tensor has %d dimensions, supported 1..%d", ndim,
                    ST_MAX_DIMS);
  }
  if ((unsigned)dtype >= ST_DTYPE_COUNT) {
    return st_error(ST_ERR_INVALID_ARG, "tensor dtype %d is not a dtype", (int)dtype);
  }
  *out = (st_tensor){.data = data, .dtype = dtype, .device = device, .ndim = ndim};
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    if (shape[d] < 0) {
      return st_error(ST_ERR_INVALID_ARG, "tensor extent %lld in dimension %d is negative",
                      (long long)shape[d], d);
    }
    out->shape[d] = shape[d];
    out->strides[d] = stride;
    /* Bounding the bytes also bounds every stride and numel, so no product below overflows. */
    if (shape[d] != 0 && stride > INT64_MAX / (int64_t)dtype_size(dtype) / shape[d]) {
      return st_error(ST_ERR_INVALID_ARG,
                      "tensor extents overflow: dimensions %d..%d of %d hold more than 2^63 bytes",
                      d, ndim - 1, ndim);
    }
    stride *= shape[d];
  }
  return ST_OK;
}

int64_t tensor_numel(const st_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

size_t tensor_nbytes(const st_tensor *t) { return (size_t)tensor_numel(t) * dtype_size(t->dtype); }

int tensor_is_contiguous(const st_tensor *t) {
  int64_t stride = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->strides[d] != stride) return 0;
    stride *= t->shape[d];
  }
  return 1;
}

const char *tensor_shape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < ndim && used < size; d++) {
    used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)shape[d]);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}
