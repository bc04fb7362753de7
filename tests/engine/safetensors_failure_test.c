/* safetensors_failure_test - proves that failures while writing or opening are clean.
 *
 * (1) Bad writer arguments (duplicate names or keys, the reserved name, bad dtype, rank or
 * extent, missing data) are ST_ERR_INVALID_ARG naming the culprit, and create no file.
 * (2) A write that fails halfway (the file size limit stands in for a full disk or a crash)
 * is ST_ERR_IO, leaves the previous file byte for byte under the final name, and leaves no
 * temporary file; so does a directory that does not exist. (3) Making each allocation of the
 * writer and of the reader fail in turn gives ST_ERR_OOM and leaks nothing.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/io/safetensors.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

static float weights[1024];
static const safetensors_metadata metadata[] = {{"format", "pt"}, {"step", "7"}};

static void check_invalid(const safetensors_tensor *tensors, size_t count,
                          const safetensors_metadata *keys, size_t key_count, const char *message) {
  char path[512];
  test_tmp_path(path, sizeof path, "invalid.safetensors");
  CHECK_STATUS(safetensors_write(path, tensors, count, keys, key_count), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), message) != NULL, "'%s' lacks '%s'", st_last_error(), message);
  CHECK(!test_file_exists(path));
}

static void check_bad_arguments(void) {
  const safetensors_tensor twice[] = {{"x", SAFETENSORS_F32, 1, {2}, weights},
                                      {"x", SAFETENSORS_I32, 1, {2}, weights}};
  check_invalid(twice, 2, NULL, 0, "tensor 'x' is given twice");
  const safetensors_metadata keys_twice[] = {{"k", "1"}, {"k", "2"}};
  check_invalid(twice, 1, keys_twice, 2, "metadata key 'k' is given twice");
  const safetensors_metadata no_value[] = {{"k", NULL}};
  check_invalid(twice, 1, no_value, 1, "metadata entry 0 has no key or value");
  const safetensors_tensor reserved = {"__metadata__", SAFETENSORS_F32, 1, {2}, weights};
  check_invalid(&reserved, 1, NULL, 0, "reserved name __metadata__");
  const safetensors_tensor bad_dtype = {"x", SAFETENSORS_DTYPE_COUNT, 1, {2}, weights};
  check_invalid(&bad_dtype, 1, NULL, 0, "tensor 'x' has invalid dtype");
  const safetensors_tensor bad_rank = {
      "x", SAFETENSORS_F32, SAFETENSORS_MAX_DIMS + 1, {2}, weights};
  check_invalid(&bad_rank, 1, NULL, 0, "tensor 'x' has 9 dimensions");
  const safetensors_tensor negative = {"x", SAFETENSORS_F32, 2, {2, -1}, weights};
  check_invalid(&negative, 1, NULL, 0, "tensor 'x' has a negative extent");
  const safetensors_tensor huge = {"x", SAFETENSORS_F32, 2, {INT64_MAX, 2}, weights};
  check_invalid(&huge, 1, NULL, 0, "overflows 64 bits");
  const safetensors_tensor no_data = {"x", SAFETENSORS_F32, 1, {2}, NULL};
  check_invalid(&no_data, 1, NULL, 0, "tensor 'x' has no data");
}

static void check_interrupted_write_keeps_old_file(void) {
  char path[512], temp[600], missing[512];
  test_tmp_path(path, sizeof path, "kept.safetensors");
  snprintf(temp, sizeof temp, "%s.tmp.%ld", path, (long)getpid());
  const safetensors_tensor small = {"w", SAFETENSORS_F32, 1, {4}, weights};
  CHECK_OK(safetensors_write(path, &small, 1, metadata, 2));
  size_t old_size = 0;
  unsigned char *old = test_read_file(path, &old_size);

  /* Writes past 1 KiB now fail with EFBIG, as they would on a full disk. */
  struct rlimit saved, limit;
  getrlimit(RLIMIT_FSIZE, &saved);
  limit = saved;
  limit.rlim_cur = 1024;
  signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  const safetensors_tensor big = {"w", SAFETENSORS_F32, 1, {1024}, weights};
  CHECK_STATUS(safetensors_write(path, &big, 1, metadata, 2), ST_ERR_IO);
  CHECK(strstr(st_last_error(), "write failed") != NULL);
  setrlimit(RLIMIT_FSIZE, &saved);

  size_t now_size = 0;
  unsigned char *now = test_read_file(path, &now_size);
  CHECK(old && now && old_size == now_size && memcmp(old, now, old_size) == 0);
  CHECK_MSG(!test_file_exists(temp), "%s left behind", temp);
  free(now);
  free(old);

  test_tmp_path(missing, sizeof missing, "no/such/dir/x.safetensors");
  CHECK_STATUS(safetensors_write(missing, &small, 1, NULL, 0), ST_ERR_IO);
  CHECK(strstr(st_last_error(), "no/such/dir/x.safetensors: cannot create") != NULL);
}

static st_status write_some(const void *path) {
  const safetensors_tensor tensors[] = {{"w", SAFETENSORS_F32, 2, {4, 8}, weights},
                                        {"b", SAFETENSORS_BF16, 1, {8}, weights}};
  return safetensors_write(path, tensors, 2, metadata, 2);
}

static st_status open_and_close(const void *path) {
  safetensors_reader *reader = NULL;
  st_status status = safetensors_reader_open(&reader, path);
  CHECK(status == ST_OK || reader == NULL);
  safetensors_reader_close(reader);
  return status;
}

static void check_out_of_memory(void) {
  char path[512];
  test_tmp_path(path, sizeof path, "oom.safetensors");
  CHECK(test_fail_each_allocation("write", write_some, path) >= 3);
  CHECK(test_fail_each_allocation("open", open_and_close, path) >= 4);
}

int main(void) {
  for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++) weights[i] = (float)i;
  uint64_t live = test_live_blocks();
  check_bad_arguments();
  check_interrupted_write_keeps_old_file();
  check_out_of_memory();
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("safetensors_failure_test");
}
