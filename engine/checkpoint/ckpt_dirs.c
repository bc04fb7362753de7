/* ckpt_dirs.c - see ckpt_dirs.h. */
#include "engine/checkpoint/ckpt_dirs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
  if (name[5] == '0' && name[6]) return -1; /* step_05 is not step_5's name, which saves use */
  char *end;
  errno = 0;
  long long step = strtoll(name + 5, &end, 10);
  return *end || errno ? -1 : step;
}

/* ckpt_step_of_name of the n bytes at s. */
static long long step_of_span(const char *s, size_t n) {
  char name[64];
  if (n >= sizeof name) return -1; /* longer than any step_<N> */
  memcpy(name, s, n);
  name[n] = '\0';
  return ckpt_step_of_name(name);
}

long long ckpt_step_of_dir(const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  size_t at = len;
  while (at > 0 && path[at - 1] != '/') at--;
  return step_of_span(path + at, len - at);
}

/* The N of an entry named .step_<N><suffix> (".tmp": a save in progress or a removal; ".old": a
 * checkpoint being replaced), or -1. */
static long long aside_step(const char *name, const char *suffix) {
  const size_t len = strlen(name), tail = strlen(suffix);
  if (name[0] != '.' || len <= tail + 1 || strcmp(name + len - tail, suffix) != 0) return -1;
  return step_of_span(name + 1, len - 1 - tail);
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

/* Removes `dir`, a directory of step `step` (a complete checkpoint, or one replaced and now
 * aside), under `.step_<step>.tmp`: renamed there first, so that a crash in the removal never
 * leaves part of a checkpoint as step_<N>, which --resume would take for complete; what it
 * leaves there the next save removes (ckpt_dirs_prepare). A failure only warns: the checkpoint
 * just saved is complete, and the old one stays whole, or aside. Returns whether it was
 * removed. */
static int retire(const char *ckpt_dir, const char *dir, long long step) {
  char aside[PATH_BYTES];
  snprintf(aside, sizeof aside, "%s/.step_%lld.tmp", ckpt_dir, step);
  st_status status = ST_OK;
  if (strcmp(dir, aside) != 0) {
    status = file_remove_flat_dir(aside); /* a crashed save's, of that step */
    if (status == ST_OK && rename(dir, aside) != 0) {
      status =
          st_error(ST_ERR_IO, "%s: cannot move it aside to remove it: %s", dir, strerror(errno));
    }
    /* The rename on disk before the removal: a file system that reorders metadata could
     * otherwise bring step_<N> back after a power loss, missing the files removed. */
    if (status == ST_OK) status = file_sync_directory(ckpt_dir, aside);
  }
  if (status == ST_OK) status = file_remove_flat_dir(aside);
  if (status != ST_OK) st_log(ST_LOG_WARN, "an old checkpoint stays: %s", st_last_error());
  return status == ST_OK;
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
  char path[PATH_BYTES];
  int removed = 0;
  for (int i = 0; keep > 0 && i + keep < n; i++) {
    snprintf(path, sizeof path, "%s/step_%lld", ckpt_dir, steps[i]);
    removed += retire(ckpt_dir, path, steps[i]);
  }
  mem_free(steps);
  return removed ? file_sync_directory(ckpt_dir, ckpt_dir) : ST_OK;
}

st_status ckpt_dirs_prepare(const char *ckpt_dir, const char *temp) {
  if (mkdir(ckpt_dir, 0777) != 0 && errno != EEXIST) {
    return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot create: %s", ckpt_dir, strerror(errno));
  }
  DIR *d = opendir(ckpt_dir);
  if (!d) return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot open: %s", ckpt_dir, strerror(errno));
  struct dirent *e;
  char path[PATH_BYTES];
  while ((e = readdir(d)) != NULL) {
    if (aside_step(e->d_name, ".tmp") >= 0) {
      snprintf(path, sizeof path, "%s/%s", ckpt_dir, e->d_name);
      /* Another step's leftover that cannot be removed holds no save back; this save's own
       * name, if it stays, fails the mkdir below. */
      if (file_remove_flat_dir(path) != ST_OK) {
        st_log(ST_LOG_WARN, "a crashed save's leftover stays: %s", st_last_error());
      }
    }
  }
  closedir(d);
  if (mkdir(temp, 0777) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot create: %s", temp, strerror(errno));
  }
  return ST_OK;
}

/* Where the file system cannot swap two directories (NFS): the checkpoint replaced is moved
 * aside to .step_<N>.old and the new one renamed in; a failure moves the old one back, and a
 * crash in between leaves it aside, where ckpt_dir_claim finds it at the next start. */
static st_status replace_aside(const char *ckpt_dir, const char *temp, const char *final,
                               long long step) {
  char old[PATH_BYTES];
  snprintf(old, sizeof old, "%s/.step_%lld.old", ckpt_dir, step);
  ST_CHECK(file_remove_flat_dir(old)); /* ckpt_dir_claim left none whose step_<N> was missing */
  if (rename(final, old) != 0) {
    return st_error(ST_ERR_IO, "%s: cannot move aside: %s", final, strerror(errno));
  }
  if (rename(temp, final) != 0) {
    const st_status status =
        st_error(ST_ERR_IO, "%s: cannot rename into place: %s", final, strerror(errno));
    rename(old, final);
    return status;
  }
  ST_CHECK(file_sync_directory(ckpt_dir, final));
  retire(ckpt_dir, old, step);
  return ST_OK;
}

st_status ckpt_dirs_publish(const char *ckpt_dir, const char *temp, const char *final,
                            long long step) {
  struct stat st;
  if (stat(final, &st) != 0) {
    if (rename(temp, final) != 0) {
      return st_error(ST_ERR_IO, "%s: cannot rename into place: %s", final, strerror(errno));
    }
    return file_sync_directory(ckpt_dir, final);
  }
  /* A checkpoint of the same step is there (a run resumed from an earlier one saves it again):
   * swapped with the new one in one step, so that step_<N> is always one whole checkpoint; the
   * old one, now at `temp`, is then removed. */
#ifdef RENAME_EXCHANGE
  const int swapped = renameat2(AT_FDCWD, temp, AT_FDCWD, final, RENAME_EXCHANGE) == 0;
#else /* a C library without renameat2 (glibc before 2.28) */
  const int swapped = 0;
  errno = ENOSYS;
#endif
  if (!swapped) {
    /* A file system that cannot swap (EINVAL), a kernel or sandbox without the call */
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EPERM) {
      return st_error(ST_ERR_IO, "%s: cannot swap in the new checkpoint: %s", final,
                      strerror(errno));
    }
    return replace_aside(ckpt_dir, temp, final, step);
  }
  ST_CHECK(file_sync_directory(ckpt_dir, final));
  retire(ckpt_dir, temp, step);
  return ST_OK;
}

/* A checkpoint a crash left aside while replace_aside replaced it (.step_<N>.old, no step_<N>)
 * is moved back; one whose replacement is in place is removed. */
static st_status recover_aside(const char *ckpt_dir) {
  DIR *d = opendir(ckpt_dir);
  if (!d) return st_error(ST_ERR_IO, "--ckpt-dir %s: cannot open: %s", ckpt_dir, strerror(errno));
  char old[PATH_BYTES], final[PATH_BYTES];
  st_status status = ST_OK;
  for (struct dirent *e; status == ST_OK && (e = readdir(d)) != NULL;) {
    const long long step = aside_step(e->d_name, ".old");
    if (step < 0) continue;
    snprintf(old, sizeof old, "%s/%s", ckpt_dir, e->d_name);
    snprintf(final, sizeof final, "%s/step_%lld", ckpt_dir, step);
    struct stat st;
    if (stat(final, &st) == 0) {
      retire(ckpt_dir, old, step);
    } else if (rename(old, final) == 0) {
      st_log(ST_LOG_WARN, "%s: restored from %s, where a crash left it while it was replaced",
             final, old);
    } else {
      status = st_error(ST_ERR_IO, "%s: cannot restore it as %s: %s", old, final, strerror(errno));
    }
  }
  closedir(d);
  return status;
}

void ckpt_dir_read_claim(const char *ckpt_dir, char *out, size_t size) {
  char path[PATH_BYTES];
  snprintf(path, sizeof path, "%s/.lock", ckpt_dir);
  out[0] = '\0';
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t got = pread(fd, out, size - 1, 0);
  out[got > 0 ? got : 0] = '\0';
  out[strcspn(out, "\n")] = '\0';
  close(fd);
}

/* Writes this job into its lock file `path` (open as fd), locked or not: pid, host and the time,
 * which makes the record this job's own, for ckpt_dir_read_claim on every rank. */
static void record_claim(int fd, const char *path) {
  char host[128] = "?", text[200];
  gethostname(host, sizeof host - 1);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  const int n = snprintf(text, sizeof text, "pid %d on %s, %lld.%09ld\n", (int)getpid(), host,
                         (long long)now.tv_sec, now.tv_nsec);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n || fsync(fd) != 0) {
    st_log(ST_LOG_WARN, "%s: cannot record this job in it: %s", path, strerror(errno));
  }
}

st_status ckpt_dir_claim(const char *ckpt_dir, int *lock_fd) {
  *lock_fd = -1;
  char path[PATH_BYTES];
  snprintf(path, sizeof path, "%s/.lock", ckpt_dir);
  const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return st_error(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      close(fd);
      char holder[256];
      ckpt_dir_read_claim(ckpt_dir, holder, sizeof holder);
      return st_error(ST_ERR_INVALID_ARG,
                      "--ckpt-dir %s is in use by another job (%s): two jobs saving into one "
                      "directory would remove and replace each other's checkpoints (if that job "
                      "is gone, its file system kept its lock: remove %s)",
                      ckpt_dir, holder[0] ? holder : "its lock file names none", path);
    }
    st_log(ST_LOG_WARN, "--ckpt-dir %s: cannot lock %s (%s): make sure no other job saves into it",
           ckpt_dir, path, strerror(errno));
  }
  record_claim(fd, path);
  *lock_fd = fd;
  return recover_aside(ckpt_dir);
}
