/* file_io.c - positioned reads and crash-safe whole-file writes (see file_io.h). */
#include "engine/io/file_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

st_status file_open_read(const char *path, int *fd, uint64_t *size) {
  /* O_NONBLOCK: opening a FIFO named by mistake must fail the check below, not wait for a
   * writer; it changes nothing for regular files. */
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) return st_error(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat info;
  if (fstat(*fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    st_status status = st_error(ST_ERR_IO, "%s: is not a readable regular file", path);
    close(*fd);
    *fd = -1;
    return status;
  }
  *size = (uint64_t)info.st_size;
  return ST_OK;
}

st_status file_read_at(int fd, const char *path, void *dst, size_t bytes, uint64_t offset) {
  char *out = dst;
  size_t done = 0;
  while (done < bytes) {
    ssize_t got = pread(fd, out + done, bytes - done, (off_t)(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return st_error(ST_ERR_IO, "%s: read of %zu bytes at offset %llu failed: %s", path, bytes,
                      (unsigned long long)offset, strerror(errno));
    }
    if (got == 0) {
      return st_error(ST_ERR_IO,
                      "%s: file ends at byte %llu, inside a read of %zu bytes at "
                      "offset %llu (did it change while open?)",
                      path, (unsigned long long)(offset + done), bytes, (unsigned long long)offset);
    }
    done += (size_t)got;
  }
  return ST_OK;
}

/* The pid keeps two processes writing the same name (two ranks by mistake) apart. */
#define TEMP_SUFFIX ".tmp.%ld"

size_t atomic_file_suffix_len(void) {
  return (size_t)snprintf(NULL, 0, TEMP_SUFFIX, (long)getpid());
}

st_status atomic_file_temp_name(const char *path, char *out, size_t size) {
  if (snprintf(out, size, "%s" TEMP_SUFFIX, path, (long)getpid()) >= (int)size) {
    return st_error(ST_ERR_INVALID_ARG, "%s: path too long", path);
  }
  return ST_OK;
}

/* What kind of file `mode` is, for an error line. */
static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

st_status atomic_file_replaceable(const char *what, const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s%s%s is %s, not a file: the file written would replace it", what,
                    *what ? " " : "", path, file_kind(st.st_mode));
  }
  return ST_OK;
}

st_status atomic_file_create(atomic_file *file, const char *path) {
  file->fd = -1;
  file->path = path;
  ST_CHECK(atomic_file_replaceable("", path));
  size_t temp_bytes = strlen(path) + atomic_file_suffix_len() + 1;
  ST_CHECK(mem_alloc((void **)&file->temp_path, temp_bytes, MEM_HOST, MEM_WORKSPACE, NULL));
  (void)atomic_file_temp_name(path, file->temp_path, temp_bytes); /* sized to fit */
  /* The name is predictable: whatever stands there (a stale temporary, a planted symlink) is
   * removed, and the file is created anew, never opened through a link. */
  unlink(file->temp_path);
  file->fd = open(file->temp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (file->fd < 0) {
    st_status status =
        st_error(ST_ERR_IO, "%s: cannot create %s: %s", path, file->temp_path, strerror(errno));
    mem_free(file->temp_path);
    file->temp_path = NULL;
    return status;
  }
  return ST_OK;
}

st_status atomic_file_write(atomic_file *file, const void *src, size_t bytes) {
  const char *in = src;
  while (bytes > 0) {
    ssize_t put = write(file->fd, in, bytes);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return st_error(ST_ERR_IO, "%s: write failed: %s", file->path, strerror(errno));
    in += put;
    bytes -= (size_t)put;
  }
  return ST_OK;
}

st_status atomic_file_write_at(atomic_file *file, const void *src, size_t bytes, uint64_t offset) {
  const char *in = src;
  while (bytes > 0) {
    ssize_t put = pwrite(file->fd, in, bytes, (off_t)offset);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return st_error(ST_ERR_IO, "%s: write failed: %s", file->path, strerror(errno));
    in += put;
    offset += (uint64_t)put;
    bytes -= (size_t)put;
  }
  return ST_OK;
}

st_status file_sync_directory(const char *dir, const char *what) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return st_error(ST_ERR_IO, "%s: cannot open directory %s to sync it: %s", what, dir,
                    strerror(errno));
  }
  /* Some file systems cannot sync a directory (EINVAL); the rename is then as durable as
   * that file system makes it, which is not an error of ours. */
  int failed = fsync(fd) != 0 && errno != EINVAL;
  int err = errno;
  close(fd);
  if (failed) return st_error(ST_ERR_IO, "%s: directory sync failed: %s", what, strerror(err));
  return ST_OK;
}

/* Makes a completed rename durable: the new directory entry is only on disk once the
 * directory itself is synced. Reuses the temp path buffer, which is longer than the path. */
static st_status sync_parent_directory(atomic_file *file) {
  const char *slash = strrchr(file->path, '/');
  if (!slash) {
    strcpy(file->temp_path, ".");
  } else {
    size_t len = slash == file->path ? 1 : (size_t)(slash - file->path);
    memcpy(file->temp_path, file->path, len);
    file->temp_path[len] = '\0';
  }
  return file_sync_directory(file->temp_path, file->path);
}

st_status atomic_file_finish(atomic_file *file, st_status status) {
  if (status == ST_OK && fsync(file->fd) != 0) {
    status = st_error(ST_ERR_IO, "%s: fsync failed: %s", file->path, strerror(errno));
  }
  if (close(file->fd) != 0 && status == ST_OK) {
    status = st_error(ST_ERR_IO, "%s: close failed: %s", file->path, strerror(errno));
  }
  file->fd = -1;
  if (status == ST_OK && rename(file->temp_path, file->path) != 0) {
    status = st_error(ST_ERR_IO, "%s: cannot rename %s into place: %s", file->path, file->temp_path,
                      strerror(errno));
  }
  if (status != ST_OK) {
    unlink(file->temp_path);
  } else {
    status = sync_parent_directory(file);
  }
  mem_free(file->temp_path);
  file->temp_path = NULL;
  return status;
}

st_status file_path_join(char *out, size_t size, const char *dir, const char *name) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= size) {
    return st_error(ST_ERR_INVALID_ARG, "%s/%s: path longer than %zu bytes", dir, name, size - 1);
  }
  return ST_OK;
}

st_status file_path_trim_slashes(char *out, size_t size, const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  if (len >= size) {
    return st_error(ST_ERR_INVALID_ARG, "%s: path longer than %zu bytes", path, size - 1);
  }
  memcpy(out, path, len);
  out[len] = '\0';
  return ST_OK;
}

st_status file_remove_flat_dir(const char *dir) {
  enum { PATH_BYTES = 4200 };
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return ST_OK;
    return st_error(ST_ERR_IO, "%s: cannot open to remove it: %s", dir, strerror(errno));
  }
  struct dirent *e;
  char path[PATH_BYTES];
  st_status status = ST_OK;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    st_status joined = file_path_join(path, sizeof path, dir, e->d_name);
    if (joined != ST_OK) {
      status = joined;
      break;
    }
    if (unlink(path) != 0 && status == ST_OK) {
      status = st_error(ST_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
  }
  closedir(d);
  if (status == ST_OK && rmdir(dir) != 0) {
    status = st_error(ST_ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
  }
  return status;
}
