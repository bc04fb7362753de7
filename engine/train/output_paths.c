/* output_paths.c - start-up checks of the paths a command writes: stat, access and pathconf for
 * the files and the directories to be made, mkdir for the checkpoint directory. */
#include "engine/train/output_paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check_mpi.h"
#include "core/error.h"
#include "engine/io/file_io.h"
#include "engine/io/job_agree.h"

/* The directory that would hold `path` exists and this process can create entries in it, and
 * the last component of `path` fits the file system, with the suffix of the temporary name it is
 * written under first when `temporary`. */
static st_status parent_check(const char *what, const char *path, int temporary) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, sizeof dir, ".");
  } else if (slash == path) {
    snprintf(dir, sizeof dir, "/");
  } else if ((size_t)(slash - path) < sizeof dir) {
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  } else {
    return st_error(ST_ERR_INVALID_ARG, "%s %s: the directory's name is too long", what, path);
  }
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT) {
      return st_error(ST_ERR_INVALID_ARG, "%s %s: directory %s does not exist", what, path, dir);
    }
    return st_error(ST_ERR_INVALID_ARG, "%s %s: directory %s: %s", what, path, dir,
                    strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG, "%s %s: %s is not a directory", what, path, dir);
  }
  /* Writing a new entry needs write and search permission on the directory. */
  if (access(dir, W_OK | X_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s %s: cannot write in directory %s: %s", what, path, dir,
                    strerror(errno));
  }
  /* Else the write would fail only at the end, once training (or resharding) is done. */
  const size_t name = strlen(slash ? slash + 1 : path);
  long name_max = pathconf(dir, _PC_NAME_MAX);
  if (name_max < 0) name_max = NAME_MAX;
  const long room = name_max - (temporary ? (long)atomic_file_suffix_len() : 0);
  if ((long)name > room) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s %s: the name has %zu bytes; the file system takes %ld here%s", what, path,
                    name, room, temporary ? " (its limit less the temporary name's suffix)" : "");
  }
  return ST_OK;
}

st_status output_path_check(const char *what, const char *path, int appends) {
  const size_t len = strlen(path);
  if (len == 0) return st_error(ST_ERR_INVALID_ARG, "%s: the path is empty", what);
  if (path[len - 1] == '/') {
    return st_error(ST_ERR_INVALID_ARG, "%s %s names a directory, not a file", what, path);
  }
  struct stat st;
  const int exists = stat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG, "%s %s is a directory, not a file", what, path);
  }
  ST_CHECK(parent_check(what, path, !appends));
  if (appends && exists && access(path, W_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s %s: cannot append to it: %s", what, path,
                    strerror(errno));
  }
  return ST_OK;
}

st_status output_dir_check(const char *what, const char *path) {
  char trimmed[PATH_MAX];
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  if (len == 0) return st_error(ST_ERR_INVALID_ARG, "%s: the path is empty", what);
  if (len >= sizeof trimmed) return st_error(ST_ERR_INVALID_ARG, "%s %s: too long", what, path);
  snprintf(trimmed, sizeof trimmed, "%.*s", (int)len, path);
  return parent_check(what, trimmed, 1);
}

/* The checkpoint directory exists (created if needed) and this process can write in it. */
static st_status ckpt_dir_check(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    return st_error(ST_ERR_INVALID_ARG, "--ckpt-dir %s: cannot create: %s", dir, strerror(errno));
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--ckpt-dir %s: not a writable directory", dir);
  }
  return ST_OK;
}

static st_status check_train_outputs(const train_options *o) {
  if (o->export_path) ST_CHECK(output_path_check("--export", o->export_path, 0));
  if (o->metrics) ST_CHECK(output_path_check("--metrics", o->metrics, 1));
  if (o->save_init) ST_CHECK(output_path_check("--save-init", o->save_init, 0));
  if (o->ckpt_dir) ST_CHECK(ckpt_dir_check(o->ckpt_dir));
  return ST_OK;
}

st_status output_paths_check_train(const train_options *o, int writer) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return job_agree(rank == writer ? check_train_outputs(o) : ST_OK);
}
