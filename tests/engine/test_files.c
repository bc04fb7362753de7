/* test_files.c - scratch files and failure checks for the engine's file tests. */
#include "tests/engine/test_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "engine/io/token_data.h"
#include "tests/testing.h"

void test_tmp_path(char *out, size_t size, const char *name) {
  const char *dir = getenv("TEST_TMPDIR");
  snprintf(out, size, "%s/%s", dir ? dir : "/tmp", name);
}

void test_make_dir(char *out, size_t size, const char *name) {
  test_tmp_path(out, size, name);
  mkdir(out, 0777);
}

void test_write_file(const char *path, const void *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(bytes, 1, size, f) == size;
  if (f) ok &= fclose(f) == 0;
  CHECK_MSG(ok, "cannot write %s", path);
}

unsigned char *test_read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *bytes = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long end = ftell(f);
    bytes = end >= 0 ? malloc((size_t)end + 1) : NULL;
    rewind(f);
    if (bytes && fread(bytes, 1, (size_t)end, f) != (size_t)end) {
      free(bytes);
      bytes = NULL;
    }
    *size = (size_t)end;
  }
  fclose(f);
  return bytes;
}

int test_file_exists(const char *path) { return access(path, F_OK) == 0; }

void test_write_token_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                            const uint16_t *tokens, size_t token_count) {
  size_t header_bytes = TOKEN_SHARD_HEADER_INTS * sizeof(int32_t);
  size_t size = header_bytes + token_count * sizeof(uint16_t);
  unsigned char *file = calloc(1, size);
  int32_t fields[3] = {magic, version, count};
  memcpy(file, fields, sizeof fields);
  if (token_count) memcpy(file + header_bytes, tokens, token_count * sizeof(uint16_t));
  test_write_file(path, file, size);
  free(file);
}

uint64_t test_live_blocks(void) {
  mem_stats stats;
  mem_stats_get(&stats);
  return stats.live_blocks;
}

int test_fail_each_allocation(const char *what, st_status (*call)(const void *arg),
                              const void *arg) {
  uint64_t live = test_live_blocks();
  for (int n = 1; n < 100; n++) {
    mem_fail_nth(n);
    st_status status = call(arg);
    mem_fail_nth(0);
    CHECK_EQ_INT(test_live_blocks(), live);
    if (status == ST_OK) return n - 1;
    CHECK_MSG(status == ST_ERR_OOM, "%s with allocation %d failing: %s", what, n, st_last_error());
  }
  CHECK_MSG(0, "%s never succeeded", what);
  return -1;
}

uint64_t test_random(uint64_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}
