/* output_paths.c - start-up checks of the paths a command writes: stat, access and pathconf for
 * the files and the directories to be made, mkdir for the checkpoint directory. */
#include "engine/train/output_paths.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check_mpi.h"
#include "core/error.h"
#include "engine/io/file_io.h"
#include "engine/io/job_agree.h"

/* Whether `dir` holds a shardtrain checkpoint: a manifest.json that says it is one (a folder of
 * another tool may have a manifest.json of its own). */
static int is_checkpoint(const char *dir) {
  char manifest[PATH_MAX], head[4096];
  if (file_path_join(manifest, sizeof manifest, dir, "manifest.json") != ST_OK) return 0;
  FILE *f = fopen(manifest, "r");
  if (!f) return 0;
  const size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  return strstr(head, "\"shardtrain-checkpoint\"") != NULL;
}

/* Any checkpoint, not only the run's own: a file written into one would replace one of its
 * files or sit among them, and its manifest's checks would fail it. */
static st_status not_in_a_checkpoint(const char *what, const char *path, const char *dir) {
  if (!is_checkpoint(dir)) return ST_OK;
  return st_error(ST_ERR_INVALID_ARG,
                  "%s %s is inside the checkpoint %s (its manifest.json is there): write it "
                  "elsewhere",
                  what, path, dir);
}

/* The directory `path` is in, into dir[PATH_MAX]. */
static st_status dir_of(const char *what, const char *path, char *dir) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, PATH_MAX, ".");
  } else if (slash == path) {
    snprintf(dir, PATH_MAX, "/");
  } else if ((size_t)(slash - path) < PATH_MAX) {
    snprintf(dir, PATH_MAX, "%.*s", (int)(slash - path), path);
  } else {
    return st_error(ST_ERR_INVALID_ARG, "%s %s: the directory's name is too long", what, path);
  }
  return ST_OK;
}

/* The directory that would hold `path` exists, is no checkpoint, and this process can create
 * entries in it, and the last component of `path` fits the file system, with the suffix of the
 * temporary name it is written under first when `temporary`. */
static st_status parent_check(const char *what, const char *path, int temporary) {
  char dir[PATH_MAX];
  ST_CHECK(dir_of(what, path, dir));
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
  ST_CHECK(not_in_a_checkpoint(what, path, dir));
  /* Writing a new entry needs write and search permission on the directory. */
  if (access(dir, W_OK | X_OK) != 0) {
    return st_error(ST_ERR_INVALID_ARG, "%s %s: cannot write in directory %s: %s", what, path, dir,
                    strerror(errno));
  }
  /* Else the write would fail only at the end, once training (or resharding) is done. */
  const char *slash = strrchr(path, '/');
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
  if (!appends) ST_CHECK(atomic_file_replaceable(what, path)); /* appended: written through */
  if (appends && exists && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s %s is a %s: opening it would wait for a reader, and the job with it", what,
                    path, S_ISFIFO(st.st_mode) ? "pipe" : "socket");
  }
  if (appends && exists) { /* written through: its directory need not take new entries */
    char dir[PATH_MAX];
    ST_CHECK(dir_of(what, path, dir));
    ST_CHECK(not_in_a_checkpoint(what, path, dir));
    if (access(path, W_OK) != 0) {
      return st_error(ST_ERR_INVALID_ARG, "%s %s: cannot append to it: %s", what, path,
                      strerror(errno));
    }
    return ST_OK;
  }
  return parent_check(what, path, !appends);
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

/* ---- outputs that are inputs ------------------------------------------------------------ */

/* `path` made absolute with its symbolic links resolved: realpath of the longest part of it that
 * exists, the rest appended as written (a file or directory still to be made). 0 when it cannot
 * be resolved. */
static int resolve(const char *path, char *out) {
  if (realpath(path, out)) return 1;
  char head[PATH_MAX];
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  if (len == 0 || len >= sizeof head) return 0;
  snprintf(head, sizeof head, "%.*s", (int)len, path);
  char *slash = strrchr(head, '/');
  const char *tail = slash ? slash + 1 : head;
  char parent[PATH_MAX];
  if (!slash) {
    snprintf(parent, sizeof parent, ".");
  } else if (slash == head) {
    snprintf(parent, sizeof parent, "/");
  } else {
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - head), head);
  }
  if (strcmp(tail, ".") == 0 || strcmp(tail, "..") == 0 || strcmp(parent, path) == 0) return 0;
  char base[PATH_MAX];
  if (!resolve(parent, base)) return 0;
  const size_t blen = strlen(base);
  return snprintf(out, PATH_MAX, "%s%s%s", base, blen && base[blen - 1] == '/' ? "" : "/", tail) <
         PATH_MAX;
}

int output_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }
  char ra[PATH_MAX], rb[PATH_MAX];
  return resolve(a, ra) && resolve(b, rb) && strcmp(ra, rb) == 0;
}

/* What of `path` lies below directory `dir`, both resolved: a pointer into rp (which receives
 * the resolved path) at the part after dir's "/", "" for dir itself, NULL when path is outside
 * dir or either cannot be resolved. */
static const char *below_dir(const char *path, const char *dir, char rp[PATH_MAX]) {
  char rd[PATH_MAX];
  if (!resolve(path, rp) || !resolve(dir, rd)) return NULL;
  size_t n = strlen(rd);
  if (n == 1) n = 0; /* "/": every path is below it */
  if (strncmp(rp, rd, n) != 0) return NULL;
  if (rp[n] == '\0') return rp + n;
  return rp[n] == '/' ? rp + n + 1 : NULL;
}

int output_inside_dir(const char *path, const char *dir) {
  char rp[PATH_MAX];
  return below_dir(path, dir, rp) != NULL;
}

st_status output_path_outside(const char *what, const char *path, const char *dir_what,
                              const char *dir) {
  if (output_inside_dir(path, dir)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s %s is in the checkpoint %s %s, which this command reads: write it "
                    "elsewhere",
                    what, path, dir_what, dir);
  }
  return ST_OK;
}

/* Where `path` stands among the step directories of `ckpt_dir`, which a run makes, replaces and
 * deletes: step_<N>, and .step_<N>.tmp and .step_<N>.old on the way; or whether it is the lock
 * file the run holds there (ckpt_dir_claim's .lock). */
typedef enum step_place { NOT_A_STEP = 0, NAMED_AS_A_STEP, IN_A_STEP, THE_LOCK } step_place;

/* The length of the step directory's name `below` begins with, ending at its end or a '/'; 0
 * when it begins with none (step_log.jsonl is no step directory). */
static size_t step_name_length(const char *below) {
  const int dot = below[0] == '.';
  const char *p = below + dot;
  if (strncmp(p, "step_", 5) != 0) return 0;
  const char *digits = p += 5;
  while (isdigit((unsigned char)*p)) p++;
  if (p == digits) return 0;
  if (dot) {
    if (strncmp(p, ".tmp", 4) != 0 && strncmp(p, ".old", 4) != 0) return 0;
    p += 4;
  }
  return *p == '\0' || *p == '/' ? (size_t)(p - below) : 0;
}

static step_place step_place_of(const char *path, const char *ckpt_dir) {
  char rp[PATH_MAX];
  const char *below = below_dir(path, ckpt_dir, rp);
  if (below && strcmp(below, ".lock") == 0) return THE_LOCK;
  const size_t n = below ? step_name_length(below) : 0;
  if (n == 0) return NOT_A_STEP;
  return below[n] == '/' ? IN_A_STEP : NAMED_AS_A_STEP;
}

/* One output of a run and the inputs and other outputs it must not be. */
typedef struct named_path {
  const char *what, *path;
} named_path;

/* `path` is none of the files the glob `pattern` (of flag `what`) matches. */
static st_status not_in_glob(const char *out_what, const char *path, const char *what,
                             const char *pattern) {
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0) return ST_OK; /* no match: the loader says so */
  st_status status = ST_OK;
  for (size_t i = 0; i < g.gl_pathc && status == ST_OK; i++) {
    if (output_same_file(path, g.gl_pathv[i])) {
      status = st_error(ST_ERR_INVALID_ARG,
                        "%s %s is a data shard of %s '%s' (%s), which the run reads: write it "
                        "elsewhere",
                        out_what, path, what, pattern, g.gl_pathv[i]);
    }
  }
  globfree(&g);
  return status;
}

/* No output of the run is an input of it, or another output: each would be destroyed (an
 * overwritten shard or checkpoint file, metrics appended into a data file, metrics replaced by
 * the export). Only looks: nothing is created. */
static st_status check_train_distinct(const train_options *o) {
  const named_path outs[] = {
      {"--export", o->export_path}, {"--metrics", o->metrics}, {"--save-init", o->save_init}};
  const int n = (int)(sizeof outs / sizeof outs[0]);
  for (int i = 0; i < n; i++) {
    const char *what = outs[i].what, *path = outs[i].path;
    if (!path) continue;
    for (int j = i + 1; j < n; j++) {
      if (outs[j].path && output_same_file(path, outs[j].path)) {
        return st_error(ST_ERR_INVALID_ARG,
                        "%s %s and %s %s are the same file: each output needs its own", what, path,
                        outs[j].what, outs[j].path);
      }
    }
    if (o->init_from && output_same_file(path, o->init_from)) {
      return st_error(ST_ERR_INVALID_ARG,
                      "%s %s is the --init-from file %s, which the run reads: write it elsewhere",
                      what, path, o->init_from);
    }
    if (o->data_train) ST_CHECK(not_in_glob(what, path, "--data-train", o->data_train));
    if (o->data_val) ST_CHECK(not_in_glob(what, path, "--data-val", o->data_val));
    if (o->resume_from) ST_CHECK(output_path_outside(what, path, "--resume-from", o->resume_from));
    if (o->ckpt_dir) {
      if (output_same_file(path, o->ckpt_dir)) {
        return st_error(ST_ERR_INVALID_ARG, "%s %s is the --ckpt-dir: each output needs its own",
                        what, path);
      }
      /* The step directories the run saves, replaces, deletes (--keep) and resumes from; a
       * file directly in --ckpt-dir, or in another directory below it, is none of them. */
      const step_place place = step_place_of(path, o->ckpt_dir);
      if (place == IN_A_STEP) {
        return st_error(ST_ERR_INVALID_ARG,
                        "%s %s is inside a checkpoint of --ckpt-dir %s, which the run writes "
                        "and reads: write it elsewhere",
                        what, path, o->ckpt_dir);
      }
      if (place == THE_LOCK) {
        return st_error(ST_ERR_INVALID_ARG,
                        "%s %s is the lock file the run holds in --ckpt-dir %s: write it "
                        "elsewhere",
                        what, path, o->ckpt_dir);
      }
      if (place == NAMED_AS_A_STEP) {
        return st_error(ST_ERR_INVALID_ARG,
                        "%s %s has the name of a checkpoint of --ckpt-dir %s (step_<N>), which "
                        "the run makes and replaces: write it elsewhere",
                        what, path, o->ckpt_dir);
      }
    }
  }
  return ST_OK;
}

static st_status check_train_outputs(const train_options *o) {
  ST_CHECK(check_train_distinct(o));
  /* Only a checkpoint is protected here: a --resume-from that is no checkpoint (the --ckpt-dir
   * itself, given to both) fails to open, with a message that names the newest one in it. */
  if (o->ckpt_dir && o->resume_from && is_checkpoint(o->resume_from)) {
    ST_CHECK(output_path_outside("--ckpt-dir", o->ckpt_dir, "--resume-from", o->resume_from));
  }
  /* Made first: an output may be a file directly in it. */
  if (o->ckpt_dir) ST_CHECK(ckpt_dir_check(o->ckpt_dir));
  if (o->export_path) ST_CHECK(output_path_check("--export", o->export_path, 0));
  if (o->metrics) ST_CHECK(output_path_check("--metrics", o->metrics, 1));
  if (o->save_init) ST_CHECK(output_path_check("--save-init", o->save_init, 0));
  return ST_OK;
}

st_status output_paths_check_train(const train_options *o, int writer) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return job_agree(rank == writer ? check_train_outputs(o) : ST_OK);
}
