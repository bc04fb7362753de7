/* atomic_file_test - proves engine/io/file_io.h's atomic files write through no link planted at
 * their temporary name (PATH.tmp.<pid>, a name anyone who can write the directory can predict):
 * a symlink there is replaced, its target left as it was, and the file lands at PATH as a
 * regular file; a stale temporary of an earlier process with the same pid is replaced too. A
 * path that is a pipe or a directory is refused, naming what it is, and stays what it was (a
 * device such as /dev/null would be replaced the same way). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/io/file_io.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

static void read_text(const char *path, char *out, size_t size) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  const size_t n = fread(out, 1, size - 1, f);
  out[n] = '\0';
  fclose(f);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* Writes "new" to `path` atomically after `plant` put something at its temporary name. */
static void write_over(const char *dir, const char *plant) {
  char path[700], temp[800], victim[700], got[64];
  snprintf(path, sizeof path, "%s/out.txt", dir);
  snprintf(victim, sizeof victim, "%s/victim.txt", dir);
  CHECK_OK(atomic_file_temp_name(path, temp, sizeof temp));
  write_text(victim, "victim");
  unlink(temp);
  if (strcmp(plant, "symlink") == 0) {
    CHECK(symlink(victim, temp) == 0);
  } else {
    write_text(temp, "stale temporary");
  }
  atomic_file file;
  CHECK_OK(atomic_file_create(&file, path));
  CHECK_OK(atomic_file_finish(&file, atomic_file_write(&file, "new", 3)));
  read_text(victim, got, sizeof got);
  CHECK_MSG(strcmp(got, "victim") == 0, "%s: the symlink's target now holds '%s'", plant, got);
  read_text(path, got, sizeof got);
  CHECK_MSG(strcmp(got, "new") == 0, "%s: the file holds '%s'", plant, got);
  struct stat st;
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  CHECK_MSG(access(temp, F_OK) != 0, "%s: the temporary name is left", plant);
}

/* `path` (made by the caller) is refused with `kind` in the line, and stays as `is` says. */
static void refused_over(const char *path, const char *kind, int (*is)(mode_t)) {
  atomic_file file;
  CHECK(atomic_file_create(&file, path) == ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), kind), "%s: %s", path, st_last_error());
  struct stat st;
  CHECK_MSG(stat(path, &st) == 0 && is(st.st_mode), "%s is no longer %s", path, kind);
}

static int is_fifo(mode_t mode) { return S_ISFIFO(mode); }
static int is_dir(mode_t mode) { return S_ISDIR(mode); }

int main(void) {
  char dir[512], path[600];
  test_make_dir(dir, sizeof dir, "atomic");
  write_over(dir, "symlink");
  write_over(dir, "stale");
  snprintf(path, sizeof path, "%s/pipe", dir);
  CHECK(mkfifo(path, 0600) == 0);
  refused_over(path, "is a pipe, not a file", is_fifo);
  snprintf(path, sizeof path, "%s/subdir", dir);
  CHECK(mkdir(path, 0700) == 0);
  refused_over(path, "is a directory, not a file", is_dir);
  return test_finish("atomic_file_test");
}
