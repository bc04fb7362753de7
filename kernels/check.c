/* check.c - argument checks for the kernel_<op> wrappers (see check.h). */
#include "kernels/check.h"

#include <stdio.h>

#include "core/error.h"

/* "[2, 5, 12]" into buf. */
static const char *device_name(st_device_kind device) {
  return device == ST_DEVICE_CPU ? "cpu" : "cuda";
}

st_status kernel_check_begin(kernel_check *c, const char *op, kernel_op kop,
                             const kernel_backend *kb, const st_stream *stream) {
  *c = (kernel_check){.op = op, .kop = kop, .kb = kb, .dtype = ST_FP32};
  if (!kb) return st_error(ST_ERR_INVALID_ARG, "%s: the kernel backend is NULL", op);
  if (!kernel_backend_has(kb, kop)) {
    return st_error(ST_ERR_UNSUPPORTED, "%s: the %s backend has no %s op", op, kb->ops->name,
                    kernel_op_name(kop));
  }
  if (!stream || !stream->backend) {
    return st_error(ST_ERR_INVALID_ARG, "%s: the stream is NULL", op);
  }
  if (stream->backend->kind != kb->ops->device) {
    return st_error(ST_ERR_INVALID_ARG, "%s: a %s stream was given to the %s kernel backend", op,
                    device_name(stream->backend->kind), kb->ops->name);
  }
  return ST_OK;
}

st_status kernel_check_placed(const kernel_check *c, const char *name, const st_tensor *t) {
  if (!t) return st_error(ST_ERR_INVALID_ARG, "%s: %s is NULL", c->op, name);
  if (t->device != c->kb->ops->device) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %s is in %s memory, the backend computes on %s", c->op,
                    name, device_name(t->device), device_name(c->kb->ops->device));
  }
  if (!tensor_is_contiguous(t)) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %s is not contiguous", c->op, name);
  }
  if (tensor_numel(t) == 0) return st_error(ST_ERR_INVALID_ARG, "%s: %s is empty", c->op, name);
  if (!t->data) return st_error(ST_ERR_INVALID_ARG, "%s: %s has no data", c->op, name);
  return ST_OK;
}

st_status kernel_check_compute(kernel_check *c, const char *name, const st_tensor *t) {
  ST_CHECK(kernel_check_placed(c, name, t));
  if ((unsigned)t->dtype >= ST_DTYPE_COUNT || !kernel_supports(c->kb, c->kop, t->dtype)) {
    return st_error(ST_ERR_UNSUPPORTED, "%s: %s is %s, which the %s backend does not run %s on",
                    c->op, name, dtype_name(t->dtype), c->kb->ops->name, kernel_op_name(c->kop));
  }
  c->dtype = t->dtype;
  return ST_OK;
}

static st_status check_dtype(const kernel_check *c, const char *name, const st_tensor *t,
                             st_dtype want) {
  ST_CHECK(kernel_check_placed(c, name, t));
  if (t->dtype != want) {
    return st_error(ST_ERR_INVALID_ARG, "%s: %s is %s, expected %s", c->op, name,
                    dtype_name(t->dtype), dtype_name(want));
  }
  return ST_OK;
}

st_status kernel_check_operand(const kernel_check *c, const char *name, const st_tensor *t) {
  return check_dtype(c, name, t, c->dtype);
}

st_status kernel_check_param_grad(const kernel_check *c, const char *name, const st_tensor *t) {
  ST_CHECK(kernel_check_placed(c, name, t));
  if (kernel_supports_grad_dtype(c->kb, c->kop, c->dtype, t->dtype)) return ST_OK;
  const int fp32_too =
      c->dtype != ST_FP32 && kernel_supports_grad_dtype(c->kb, c->kop, c->dtype, ST_FP32);
  return st_error(ST_ERR_INVALID_ARG, "%s: %s is %s, expected %s%s", c->op, name,
                  dtype_name(t->dtype), dtype_name(c->dtype), fp32_too ? " or fp32" : "");
}

st_status kernel_check_same_dtype(const kernel_check *c, const char *name, const st_tensor *t,
                                  const char *ref_name, const st_tensor *ref) {
  if (t->dtype == ref->dtype) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG, "%s: %s is %s and %s is %s: give both the same dtype", c->op,
                  name, dtype_name(t->dtype), ref_name, dtype_name(ref->dtype));
}

st_status kernel_check_stats(const kernel_check *c, const char *name, const st_tensor *t) {
  return check_dtype(c, name, t, ST_FP32);
}

st_status kernel_check_ndim(const kernel_check *c, const char *name, const st_tensor *t, int ndim) {
  if (t->ndim == ndim) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG, "%s: %s has %d dimensions, expected %d", c->op, name, t->ndim,
                  ndim);
}

st_status kernel_check_shape(const kernel_check *c, const char *name, const st_tensor *t, int ndim,
                             const int64_t *shape) {
  int same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
  if (same) return ST_OK;
  char got[96], want[96];
  return st_error(ST_ERR_INVALID_ARG, "%s: %s is %s, expected %s", c->op, name,
                  tensor_shape_text(got, sizeof got, t->ndim, t->shape),
                  tensor_shape_text(want, sizeof want, ndim, shape));
}

st_status kernel_check_like(const kernel_check *c, const char *name, const st_tensor *t,
                            const st_tensor *ref) {
  ST_CHECK(kernel_check_operand(c, name, t));
  return kernel_check_shape(c, name, t, ref->ndim, ref->shape);
}

st_status kernel_check_rows(const kernel_check *c, const char *name, const st_tensor *t,
                            int64_t rows, int64_t cols) {
  if (kernel_rows(t) == rows && kernel_cols(t) == cols) return ST_OK;
  char got[96];
  return st_error(ST_ERR_INVALID_ARG, "%s: %s is %s, expected %lld rows of %lld", c->op, name,
                  tensor_shape_text(got, sizeof got, t->ndim, t->shape), (long long)rows,
                  (long long)cols);
}

st_status kernel_check_numel(const kernel_check *c, const char *name, const st_tensor *t,
                             int64_t numel) {
  if (tensor_numel(t) == numel) return ST_OK;
  char got[96];
  return st_error(ST_ERR_INVALID_ARG, "%s: %s is %s, expected %lld elements", c->op, name,
                  tensor_shape_text(got, sizeof got, t->ndim, t->shape), (long long)numel);
}

st_status kernel_check_ids(const kernel_check *c, const char *name, const int32_t *ids) {
  return ids ? ST_OK : st_error(ST_ERR_INVALID_ARG, "%s: %s is NULL", c->op, name);
}
