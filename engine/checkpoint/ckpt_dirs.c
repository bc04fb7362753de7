/* ckpt_dirs.c - see ckpt_dirs.h. */
#include "engine/checkpoint/ckpt_dirs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/io/file_io.h"

#define PATH_BYTES 4200

static int is_complete(const char *ckpt_dir, const char *name) {
  char path[PATH_BYTES];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s/DONE", ckpt_dir, name);
  return stat(path, &st) == 0;
}

long long ckpt_step_of_name(const char *name) {
  if (strncmp(name, "step_", 5) != 0 || !isdigit((unsigned char)name[5])) return -1;
  char *end;
  errno = 0;
  long long step = strtoll(name + 5, &end, 10);
  return *end || errno ? -1 : step;
}

long long ckpt_step_of_dir(const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  size_t at = len;
  while (at > 0 && path[at - 1] != '/') at--;
  char name[64];
  if (len - at >= sizeof name) return -1; /* longer than any step_<N> */
  memcpy(name, path + at, len - at);
  name[len - at] = '\0';
  return ckpt_step_of_name(name);
}

/* The complete checkpoints' steps, ascending (at most `capacity`); returns the count. */
static int complete_steps(const char *ckpt_dir, long long *steps, int capacity) {
  DIR *d = opendir(ckpt_dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < capacity) {
    long long step = ckpt_step_of_name(e->d_name);
    if (step >= 0 && is_complete(ckpt_dir, e->d_name)) steps[n++] = step;
  }
  closedir(d);
  for (int i = 1; i < n; i++) { /* insertion sort: a directory holds few checkpoints */
    long long x = steps[i];
    int j = i;
    for (; j > 0 && steps[j - 1] > x; j--) steps[j] = steps[j - 1];
    steps[j] = x;
  }
  return n;
}

#define MAX_LISTED 4096

st_status ckpt_find_latest(const char *ckpt_dir, char *out, size_t size, int *found) {
  struct stat st;
  if (stat(ckpt_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG, "--ckpt-dir %s: no such directory", ckpt_dir);
  }
  long long *steps = NULL;
  ST_CHECK(mem_alloc((void **)&steps, MAX_LISTED * sizeof *steps, MEM_HOST, MEM_WORKSPACE, NULL));
  int n = complete_steps(ckpt_dir, steps, MAX_LISTED);
  *found = n > 0;
  if (n) snprintf(out, size, "%s/step_%lld", ckpt_dir, steps[n - 1]);
  mem_free(steps);
  return ST_OK;
}

/* Checkpoints of later steps than `saved` are left from a
 * run that this one, resumed from an earlier step, has branched off: they are not this run's to
 * delete (counting them would delete the one just written), but --resume would pick the newest,
 * so a warning says so. */
st_status ckpt_dirs_tidy(const char *ckpt_dir, int keep, long long saved) {
  long long *steps = NULL;
  ST_CHECK(mem_alloc((void **)&steps, MAX_LISTED * sizeof *steps, MEM_HOST, MEM_WORKSPACE, NULL));
  const int listed = complete_steps(ckpt_dir, steps, MAX_LISTED);
  if (listed > 0 && steps[listed - 1] > saved) {
    st_log(ST_LOG_WARN,
           "%s/step_%lld is newer than the step_%lld just saved (another run's): --resume "
           "continues from the newest; remove it, or use --resume-from",
           ckpt_dir, steps[listed - 1], saved);
  }
  int n = listed;
  while (n > 0 && steps[n - 1] > saved) n--;
  st_status status = ST_OK;
  char path[PATH_BYTES];
  int removed = 0;
  for (int i = 0; keep > 0 && status == ST_OK && i + keep < n; i++, removed++) {
    snprintf(path, sizeof path, "%s/step_%lld", ckpt_dir, steps[i]);
    status = file_remove_flat_dir(path);
  }
  mem_free(steps);
  return status == ST_OK && removed ? file_sync_directory(ckpt_dir, ckpt_dir) : status;
}

st_status ckpt_dirs_prepare(const char *ckpt_dir, const char *temp) {
  if (mkdir(ckpt_dir, 0777) != 0 && errno != EEXIST) {
    return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot create: %s", ckpt_dir, strerror(errno));
  }
  DIR *d = opendir(ckpt_dir);
  if (!d) return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot open: %s", ckpt_dir, strerror(errno));
  struct dirent *e;
  char path[PATH_BYTES];
  st_status status = ST_OK;
  while ((e = readdir(d)) != NULL && status == ST_OK) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, ".step_", 6) == 0 && len > 4 &&
        strcmp(e->d_name + len - 4, ".tmp") == 0) {
      snprintf(path, sizeof path, "%s/%s", ckpt_dir, e->d_name);
      status = file_remove_flat_dir(path);
    }
  }
  closedir(d);
  ST_CHECK(status);
  if (mkdir(temp, 0777) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot create: %s", temp, strerror(errno));
  }
  return ST_OK;
}

st_status ckpt_dirs_publish(const char *ckpt_dir, const char *temp, const char *final,
                            long long step) {
  char path[PATH_BYTES];
  /* The checkpoint replaced is moved aside, the new one renamed in, the old one removed. */
  snprintf(path, sizeof path, "%s/.step_%lld.old", ckpt_dir, step);
  struct stat st;
  int replacing = stat(final, &st) == 0;
  ST_CHECK(file_remove_flat_dir(path));
  if (replacing && rename(final, path) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot move aside: %s", final, strerror(errno));
  }
  if (rename(temp, final) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot rename into place: %s", final, strerror(errno));
  }
  ST_CHECK(file_sync_directory(ckpt_dir, final));
  return replacing ? file_remove_flat_dir(path) : ST_OK;
}
