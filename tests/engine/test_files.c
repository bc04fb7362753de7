/* test_files.c - scratch file helpers for the engine's file tests (see test_files.h). */
#include "tests/engine/test_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/alloc.h"
#include "tests/testing.h"

void test_tmp_path(char *out, size_t size, const char *name) {
  const char *dir = getenv("TEST_TMPDIR");
  snprintf(out, size, "%s/%s", dir ? dir : "/tmp", name);
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

uint64_t test_live_blocks(void) {
  mem_stats stats;
  mem_stats_get(&stats);
  return stats.live_blocks;
}
