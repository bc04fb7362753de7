/* cast_test.c - the CUDA fp32 <-> bf16 kernels give the same bits as core/dtype.h's CPU
 * conversion, on random values and on the edge cases (ties, subnormals, overflow, NaN, -0),
 * for a length that is not a multiple of the block size. SKIP without a GPU or without CUDA. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/device.h"
#include "tests/testing.h"

#ifdef ST_HAVE_CUDA
#include "kernels/cuda/cast.h"

static void fill_inputs(float *x, size_t n) {
  const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                            0x3f808000u, 0x3f818000u, 0x00000001u, 0x007fffffu, 0x7f7fffffu};
  size_t ne = sizeof edges / sizeof edges[0];
  uint32_t state = 12345;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    uint32_t bits = i < ne ? edges[i] : state;
    memcpy(&x[i], &bits, sizeof bits);
  }
}

static int run(void) {
  st_device dev;
  CHECK_OK(device_select("cuda", 0, &dev));
  st_stream stream;
  CHECK_OK(stream_create(&dev, &stream));
  const size_t n = 100003;
  float *x = NULL, *dx = NULL, *back = NULL;
  uint16_t *h = NULL, *dh = NULL;
  CHECK_OK(mem_alloc((void **)&x, n * 4, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc((void **)&back, n * 4, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc((void **)&h, n * 2, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK_OK(mem_alloc((void **)&dx, n * 4, MEM_DEVICE, MEM_WORKSPACE, &dev));
  CHECK_OK(mem_alloc((void **)&dh, n * 2, MEM_DEVICE, MEM_WORKSPACE, &dev));
  fill_inputs(x, n);
  CHECK_OK(stream_memcpy(&stream, dx, x, n * 4));
  CHECK_OK(cuda_cast_f32_to_bf16(dh, dx, n, stream.handle));
  CHECK_OK(stream_memcpy(&stream, h, dh, n * 2));
  CHECK_OK(cuda_cast_bf16_to_f32(dx, dh, n, stream.handle));
  CHECK_OK(stream_memcpy(&stream, back, dx, n * 4));
  CHECK_OK(stream_sync(&stream));
  size_t bad_down = 0, bad_up = 0;
  for (size_t i = 0; i < n; i++) {
    bad_down += h[i] != bf16_from_f32(x[i]);
    float want = f32_from_bf16(h[i]);
    bad_up += memcmp(&back[i], &want, 4) != 0;
  }
  CHECK_MSG(bad_down == 0, "%zu of %zu fp32->bf16 results differ from the CPU", bad_down, n);
  CHECK_MSG(bad_up == 0, "%zu of %zu bf16->fp32 results differ from the CPU", bad_up, n);
  mem_free(dh);
  mem_free(dx);
  mem_free(h);
  mem_free(back);
  mem_free(x);
  stream_destroy(&stream);
  return test_finish("cast_test");
}
#endif

int main(void) {
#ifdef ST_HAVE_CUDA
  if (device_cuda_count() == 0) return test_skip("cast_test", "no usable GPU");
  return run();
#else
  return test_skip("cast_test", "built without CUDA");
#endif
}
