/* check.h - the argument checks behind every kernel_<op> wrapper, written once so that every
 * backend rejects the same calls with the same messages. Each check returns ST_OK or
 * ST_ERR_INVALID_ARG / ST_ERR_UNSUPPORTED with a detail naming the op, the operand and the
 * numbers involved ("kernel_matmul_forward: weight is [12, 7], expected [13, 7]"). */
#ifndef ST_KERNELS_CHECK_H
#define ST_KERNELS_CHECK_H

#include "kernels/backend_ops.h"

typedef struct kernel_check {
  const char *op;
  kernel_op kop; /* the vocabulary entry whose dtypes kernel_check_compute asks about */
  const kernel_backend *kb;
  st_dtype dtype; /* the op's compute dtype, set by kernel_check_compute */
} kernel_check;

/* Starts checking `op` (the wrapper's name, for messages), an instance of vocabulary entry
 * `kop`: the backend and the stream exist and share a device, and the backend has the op. */
st_status kernel_check_begin(kernel_check *c, const char *op, kernel_op kop,
                             const kernel_backend *kb, const st_stream *stream);

/* `t` is present, on the backend's device, contiguous, not empty, and has data. */
st_status kernel_check_placed(const kernel_check *c, const char *name, const st_tensor *t);

/* `t` is placed and in a dtype the backend runs the op on (kernel_supports); that dtype
 * becomes the op's. */
st_status kernel_check_compute(kernel_check *c, const char *name, const st_tensor *t);

/* `t` is placed and has the op's dtype. */
st_status kernel_check_operand(const kernel_check *c, const char *name, const st_tensor *t);

/* `t` is placed and holds a parameter gradient the op's backward writes (dweight, dbias, dwte,
 * dwpe): in the op's dtype, or in a gradient dtype the backend takes beside it
 * (kernel_supports_grad_dtype: fp32 beside 16-bit activations on CUDA). */
st_status kernel_check_param_grad(const kernel_check *c, const char *name, const st_tensor *t);

/* `t` has the dtype of `ref` (named `ref_name`): the parameter gradients of one call share one. */
st_status kernel_check_same_dtype(const kernel_check *c, const char *name, const st_tensor *t,
                                  const char *ref_name, const st_tensor *ref);

/* `t` is placed and fp32: the statistics of an op (mean, rstd, losses). */
st_status kernel_check_stats(const kernel_check *c, const char *name, const st_tensor *t);

/* `t` has `ndim` dimensions. */
st_status kernel_check_ndim(const kernel_check *c, const char *name, const st_tensor *t, int ndim);

/* `t` has exactly this shape. */
st_status kernel_check_shape(const kernel_check *c, const char *name, const st_tensor *t, int ndim,
                             const int64_t *shape);

/* `t` is an operand (kernel_check_operand) with the shape of `ref`. */
st_status kernel_check_like(const kernel_check *c, const char *name, const st_tensor *t,
                            const st_tensor *ref);

/* `t` is `rows` rows of `cols` features (kernels.h's rows convention). */
st_status kernel_check_rows(const kernel_check *c, const char *name, const st_tensor *t,
                            int64_t rows, int64_t cols);

/* `t` holds `numel` elements, whatever its shape (one statistic per row). */
st_status kernel_check_numel(const kernel_check *c, const char *name, const st_tensor *t,
                             int64_t numel);

/* An id array (tokens, targets) is present. Its values live on the device, out of reach. */
st_status kernel_check_ids(const kernel_check *c, const char *name, const int32_t *ids);

#endif /* ST_KERNELS_CHECK_H */
