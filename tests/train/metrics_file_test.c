/* metrics_file_test.c - the metrics file's appending (engine/train/metrics.h) after a write cut
 * short: a file whose last line has no newline (a full disk, a killed rank) gets one before the
 * next record, so that record is a line of its own and the cut line stays the only bad one; a
 * complete or empty file gets nothing extra; a missing file is created; metrics_sync makes the
 * lines durable, and on a device (--metrics /dev/null) succeeds with nothing to sync. Each file is
 * read back and compared byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/train/metrics.h"
#include "tests/testing.h"

static char path[512];

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  if (!CHECK(f)) return;
  fputs(text, f);
  fclose(f);
}

static void read_file(char *out, size_t size) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!CHECK(f)) return;
  const size_t n = fread(out, 1, size - 1, f);
  out[n] = '\0';
  fclose(f);
}

/* Appends one record of step `step` to a file that held `before` (NULL: no file), and checks
 * the file then holds `before`, `separator` and the record's line. */
static void check_append(const char *before, const char *separator, int step) {
  remove(path);
  if (before) write_file(before);
  FILE *f = metrics_open_append(path);
  if (!CHECK_MSG(f, "open after '%s'", before ? before : "(no file)")) return;
  const mem_stats mem = {0};
  const step_record r = {
      .step = step, .loss = 2.5, .mem = &mem, .param_dtype = "fp32", .reduce_dtype = "fp32"};
  CHECK(metrics_write_json(f, &r));
  CHECK(metrics_sync(f));
  fclose(f);
  char got[8192], want_start[256];
  read_file(got, sizeof got);
  snprintf(want_start, sizeof want_start, "%s%s{\"step\": %d,", before ? before : "", separator,
           step);
  CHECK_MSG(strncmp(got, want_start, strlen(want_start)) == 0, "after '%s': got '%.*s'",
            before ? before : "(no file)", (int)strlen(want_start) + 8, got);
  const size_t n = strlen(got);
  CHECK_MSG(n > 0 && got[n - 1] == '\n' && strchr(got + strlen(want_start), '\n') == got + n - 1,
            "after '%s': the record is not one line ending the file",
            before ? before : "(no file)");
}

int main(void) {
  snprintf(path, sizeof path, "%s/metrics.jsonl",
           getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  check_append(NULL, "", 0);
  check_append("", "", 1);
  check_append("{\"step\": 0}\n", "", 1);
  check_append("{\"step\": 0}\n{\"step\": 1, \"lo", "\n", 2); /* cut short */
  check_append("x", "\n", 3);
  CHECK(metrics_open_append("/nonexistent-dir/metrics.jsonl") == NULL);
  /* A device takes records, unrepaired and unsynced (fsync there fails with EINVAL). */
  FILE *null = metrics_open_append("/dev/null");
  if (CHECK(null)) {
    const mem_stats mem = {0};
    const step_record r = {.mem = &mem, .param_dtype = "fp32", .reduce_dtype = "fp32"};
    CHECK(metrics_write_json(null, &r));
    CHECK(metrics_sync(null));
    fclose(null);
  }
  return test_finish("metrics_file_test");
}
