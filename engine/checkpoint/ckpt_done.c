/* ckpt_done.c - see ckpt_done.h. */
#include "engine/checkpoint/ckpt_done.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/checkpoint/ckpt_dirs.h"
#include "engine/io/file_io.h"
#include "engine/io/sha256.h"

enum { DONE_PATH_BYTES = 4200, DONE_TEXT_BYTES = 160 };

st_status ckpt_done_write(const char *dir, const ckpt_manifest *m) {
  char path[DONE_PATH_BYTES], hex[SHA256_HEX_SIZE], text[DONE_TEXT_BYTES];
  uint64_t bytes = 0;
  ST_CHECK(file_path_join(path, sizeof path, dir, "manifest.json"));
  ST_CHECK(ckpt_manifest_write(m, path));
  ST_CHECK(sha256_file(path, hex, &bytes));
  ST_CHECK(file_path_join(path, sizeof path, dir, "DONE"));
  const int n =
      snprintf(text, sizeof text, "step %lld\nmanifest sha256 %s\n", (long long)m->step, hex);
  atomic_file done;
  ST_CHECK(atomic_file_create(&done, path));
  return atomic_file_finish(&done, atomic_file_write(&done, text, (size_t)n));
}

/* The lines of DONE in `text` (`size` bytes): "step <N>", then "manifest sha256 <64 hex>"
 * (absent before 2026-11-29: hex is then ""). 0 when it is not that. */
static int parse_done(const char *text, size_t size, long long *step, char hex[SHA256_HEX_SIZE]) {
  static const char hash_key[] = "manifest sha256 ";
  const size_t key_bytes = sizeof hash_key - 1, hex_bytes = SHA256_HEX_SIZE - 1;
  if (strncmp(text, "step ", 5) != 0 || !isdigit((unsigned char)text[5])) return 0;
  char *end = NULL;
  errno = 0;
  *step = strtoll(text + 5, &end, 10);
  if (errno || *end != '\n') return 0;
  const char *rest = end + 1;
  hex[0] = '\0';
  if ((size_t)(rest - text) == size) return 1;
  if (strncmp(rest, hash_key, key_bytes) != 0 ||
      strspn(rest + key_bytes, "0123456789abcdef") != hex_bytes ||
      rest[key_bytes + hex_bytes] != '\n' ||
      (size_t)(rest + key_bytes + hex_bytes + 1 - text) != size) {
    return 0;
  }
  memcpy(hex, rest + key_bytes, hex_bytes);
  hex[hex_bytes] = '\0';
  return 1;
}

static st_status read_done(const char *path, long long *step, char hex[SHA256_HEX_SIZE]) {
  int fd = -1;
  uint64_t size = 0;
  ST_CHECK(file_open_read(path, &fd, &size));
  char text[DONE_TEXT_BYTES] = {0}; /* the zero after the text ends the parse's strings */
  const int fits = size < sizeof text;
  const st_status status = fits ? file_read_at(fd, path, text, (size_t)size, 0) : ST_OK;
  close(fd);
  ST_CHECK(status);
  if (!fits || !parse_done(text, (size_t)size, step, hex)) {
    return st_error(ST_ERR_FORMAT,
                    "%s: not a checkpoint's DONE (the lines \"step <N>\" and \"manifest sha256 "
                    "<hex>\")",
                    path);
  }
  return ST_OK;
}

st_status ckpt_done_check(const char *dir, const ckpt_manifest *m) {
  char path[DONE_PATH_BYTES], recorded[SHA256_HEX_SIZE], hex[SHA256_HEX_SIZE];
  long long step = -1;
  ST_CHECK(file_path_join(path, sizeof path, dir, "DONE"));
  ST_CHECK(read_done(path, &step, recorded));
  if (step != (long long)m->step) {
    return st_error(ST_ERR_FORMAT, "%s says step %lld, its manifest step %lld", path, step,
                    (long long)m->step);
  }
  const long long named = ckpt_step_of_dir(dir);
  if (named >= 0 && named != (long long)m->step) {
    return st_error(ST_ERR_FORMAT, "%s is named for step %lld, its manifest is of step %lld", dir,
                    named, (long long)m->step);
  }
  if (!recorded[0]) return ST_OK;
  uint64_t bytes = 0;
  ST_CHECK(file_path_join(path, sizeof path, dir, "manifest.json"));
  ST_CHECK(sha256_file(path, hex, &bytes));
  if (strcmp(hex, recorded) != 0) {
    return st_error(ST_ERR_FORMAT,
                    "%s: SHA-256 %.16s..., DONE records %.16s...: the manifest was edited or "
                    "damaged after the save",
                    path, hex, recorded);
  }
  return ST_OK;
}
