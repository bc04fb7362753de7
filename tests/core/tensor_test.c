/* tensor_test.c - proves tensor_make builds row-major descriptors (shape, strides, numel,
 * nbytes, contiguity) for 1 to ST_MAX_DIMS dimensions, zero extents included, and refuses a
 * bad dimension count, a negative extent, an unknown dtype and extents whose byte count does
 * not fit in int64, each with ST_ERR_INVALID_ARG and a detail. */
#include "core/tensor.h"

#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "tests/testing.h"

static void check_descriptor(int ndim, const int64_t *shape, const int64_t *want_strides,
                             int64_t want_numel) {
  float storage[1];
  for (int dtype = 0; dtype < ST_DTYPE_COUNT; dtype++) {
    st_tensor t;
    CHECK_OK(tensor_make(&t, storage, (st_dtype)dtype, ST_DEVICE_CPU, ndim, shape));
    CHECK(t.data == storage);
    CHECK_EQ_INT(t.dtype, dtype);
    CHECK_EQ_INT(t.device, ST_DEVICE_CPU);
    CHECK_EQ_INT(t.ndim, ndim);
    for (int d = 0; d < ndim; d++) {
      CHECK_MSG(t.shape[d] == shape[d], "ndim %d: shape[%d] = %lld", ndim, d,
                (long long)t.shape[d]);
      CHECK_MSG(t.strides[d] == want_strides[d], "ndim %d: strides[%d] = %lld, expected %lld", ndim,
                d, (long long)t.strides[d], (long long)want_strides[d]);
    }
    CHECK_EQ_INT(tensor_numel(&t), want_numel);
    CHECK_EQ_INT(tensor_nbytes(&t), want_numel * (dtype == ST_FP32 ? 4 : 2));
    CHECK(tensor_is_contiguous(&t));
  }
}

static void test_shapes_and_strides(void) {
  check_descriptor(1, (const int64_t[]){7}, (const int64_t[]){1}, 7);
  check_descriptor(2, (const int64_t[]){3, 5}, (const int64_t[]){5, 1}, 15);
  check_descriptor(3, (const int64_t[]){2, 3, 4}, (const int64_t[]){12, 4, 1}, 24);
  check_descriptor(4, (const int64_t[]){2, 3, 4, 5}, (const int64_t[]){60, 20, 5, 1}, 120);
  check_descriptor(4, (const int64_t[]){1, 1, 1, 1}, (const int64_t[]){1, 1, 1, 1}, 1);
  check_descriptor(3, (const int64_t[]){3, 0, 2}, (const int64_t[]){0, 2, 1}, 0);
  check_descriptor(2, (const int64_t[]){1 << 20, 1 << 20}, (const int64_t[]){1 << 20, 1},
                   (int64_t)1 << 40);

  st_tensor t;
  CHECK_OK(tensor_make(&t, NULL, ST_BF16, ST_DEVICE_CUDA, 1, (const int64_t[]){3}));
  CHECK_EQ_INT(t.device, ST_DEVICE_CUDA); /* a descriptor only records where data lives */
}

static void test_contiguity(void) {
  st_tensor t;
  CHECK_OK(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, 2, (const int64_t[]){3, 4}));
  st_tensor transposed = t;
  transposed.shape[0] = 4;
  transposed.shape[1] = 3;
  transposed.strides[0] = 1;
  transposed.strides[1] = 4;
  CHECK(!tensor_is_contiguous(&transposed));

  st_tensor column = t; /* the first column of the 3x4 matrix: 3x1 with row stride 4 */
  column.shape[1] = 1;
  CHECK(!tensor_is_contiguous(&column));

  st_tensor row = t; /* one row viewed as 1x4: an extent of 1 may carry any stride */
  row.shape[0] = 1;
  row.strides[0] = 1000;
  CHECK(tensor_is_contiguous(&row));

  st_tensor sliced = t; /* columns 0..1 of each row: 3x2 with row stride 4 */
  sliced.shape[1] = 2;
  CHECK(!tensor_is_contiguous(&sliced));
  CHECK_EQ_INT(tensor_numel(&sliced), 6);
  CHECK_EQ_INT(tensor_nbytes(&sliced), 24);
}

static void test_refusals(void) {
  int64_t shape[ST_MAX_DIMS + 1] = {2, 2, 2, 2, 2};
  st_tensor t;
  const int bad_ndims[] = {0, -1, ST_MAX_DIMS + 1, 1000};
  for (size_t i = 0; i < sizeof bad_ndims / sizeof bad_ndims[0]; i++) {
    st_error_clear();
    CHECK_STATUS(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, bad_ndims[i], shape),
                 ST_ERR_INVALID_ARG);
    CHECK_MSG(strstr(st_last_error(), "dimensions") != NULL, "ndim %d: detail '%s'", bad_ndims[i],
              st_last_error());
  }

  for (int ndim = 1; ndim <= ST_MAX_DIMS; ndim++) {
    for (int d = 0; d < ndim; d++) {
      int64_t negative[ST_MAX_DIMS] = {2, 3, 4, 5};
      negative[d] = -3;
      st_error_clear();
      CHECK_STATUS(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, ndim, negative),
                   ST_ERR_INVALID_ARG);
      CHECK_MSG(strstr(st_last_error(), "-3") != NULL, "ndim %d dim %d: detail '%s'", ndim, d,
                st_last_error());
    }
  }

  CHECK_STATUS(tensor_make(&t, NULL, ST_DTYPE_COUNT, ST_DEVICE_CPU, 1, shape), ST_ERR_INVALID_ARG);
  CHECK_STATUS(tensor_make(&t, NULL, (st_dtype)-1, ST_DEVICE_CPU, 1, shape), ST_ERR_INVALID_ARG);
}

/* Extents whose product overflows would make numel, nbytes and the strides meaningless (and
 * signed overflow is undefined behaviour); such a shape may come from a corrupt file. */
static void test_overflowing_extents(void) {
  st_tensor t;
  const int64_t big = (int64_t)1 << 32;
  CHECK_STATUS(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, 2, (const int64_t[]){big, big}),
               ST_ERR_INVALID_ARG);
  CHECK_STATUS(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, 4, (const int64_t[]){big, 2, big, 3}),
               ST_ERR_INVALID_ARG);
  CHECK_STATUS(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, 3, (const int64_t[]){0, INT64_MAX, 4}),
               ST_ERR_INVALID_ARG);
  /* The elements fit in int64 but their bytes do not. */
  CHECK_STATUS(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, 1, (const int64_t[]){INT64_MAX / 2}),
               ST_ERR_INVALID_ARG);
  /* The largest byte count that fits is accepted. */
  CHECK_OK(tensor_make(&t, NULL, ST_BF16, ST_DEVICE_CPU, 1, (const int64_t[]){INT64_MAX / 2}));
  CHECK_EQ_INT(tensor_numel(&t), INT64_MAX / 2);
  CHECK_OK(tensor_make(&t, NULL, ST_FP32, ST_DEVICE_CPU, 2, (const int64_t[]){big, 1 << 20}));
  CHECK_EQ_INT(tensor_nbytes(&t), (uint64_t)big * (1 << 20) * 4);
}

int main(void) {
  test_shapes_and_strides();
  test_contiguity();
  test_refusals();
  test_overflowing_extents();
  return test_finish("tensor_test");
}
