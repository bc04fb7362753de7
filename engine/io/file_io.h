/* file_io.h - the POSIX file operations shared by the engine's readers and writers; every
 * failure becomes st_error with the file name and the system's reason.
 *
 * Readers use positioned reads (pread), so threads may share a descriptor without sharing a
 * file offset. Writers go through atomic_file: bytes go to a temporary file in the same
 * directory, which is fsynced and then renamed over the final name, so a crash at any moment
 * leaves either the old file or the complete new one under that name, never a partial one.
 */
#ifndef ST_ENGINE_IO_FILE_IO_H
#define ST_ENGINE_IO_FILE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "shardtrain.h"

/* Opens a regular file for reading and reports its size. */
st_status file_open_read(const char *path, int *fd, uint64_t *size);

/* Reads exactly `bytes` at `offset`; a file that ends early is ST_ERR_IO (callers check sizes
 * against the file size first, so this only happens when the file changes under them). */
st_status file_read_at(int fd, const char *path, void *dst, size_t bytes, uint64_t offset);

/* The bytes atomic_file adds to a path's last component for this process's temporary name
 * (".tmp.<pid>"). */
size_t atomic_file_suffix_len(void);

/* `path`'s temporary name for this process into out[size] (for a whole directory written under
 * it, as reshard does); ST_ERR_INVALID_ARG when it does not fit. */
st_status atomic_file_temp_name(const char *path, char *out, size_t size);

typedef struct atomic_file {
  int fd;
  const char *path; /* the final name (borrowed from the caller) */
  char *temp_path;  /* "<path>.tmp.<pid>", MEM_WORKSPACE, owned until atomic_file_finish */
} atomic_file;

/* ST_ERR_INVALID_ARG, naming what stands there, when `path` exists and is not a regular file
 * (a device such as /dev/null, a pipe, a socket, a directory): a file written whole and renamed
 * into place would replace it. */
st_status atomic_file_replaceable(const char *what, const char *path);

/* Creates the temporary file that will become `path`, anew: whatever stands at its name (a
 * stale temporary, a symlink planted there) is removed first, and the file is never opened
 * through a link. `path` must be atomic_file_replaceable. */
st_status atomic_file_create(atomic_file *file, const char *path);

st_status atomic_file_write(atomic_file *file, const void *src, size_t bytes);

/* Writes `bytes` at `offset` of the temporary file (pwrite), for writers that fill a laid-out
 * file in any order. */
st_status atomic_file_write_at(atomic_file *file, const void *src, size_t bytes, uint64_t offset);

/* Ends the write. With status ST_OK: fsync, rename over the final name, fsync the directory so
 * the rename itself survives a crash. With an error (or if any of those steps fails): the
 * temporary file is removed and the final name is left untouched. Returns the resulting
 * status; the handle is released in every case. */
st_status atomic_file_finish(atomic_file *file, st_status status);

/* fsyncs a directory, so renames and removals inside it survive a crash. A file system that
 * cannot sync directories (EINVAL) is not an error. `what` names the file the sync is for. */
st_status file_sync_directory(const char *dir, const char *what);

/* dir/name into out; a path that does not fit is ST_ERR_INVALID_ARG, never a silent
 * truncation. */
st_status file_path_join(char *out, size_t size, const char *dir, const char *name);

/* `path` without the trailing slashes a shell's completion adds to a directory ("/" stays),
 * into out; one that does not fit is ST_ERR_INVALID_ARG. */
st_status file_path_trim_slashes(char *out, size_t size, const char *path);

/* Removes a directory holding only plain files (a checkpoint step directory); a directory
 * that does not exist is fine. */
st_status file_remove_flat_dir(const char *dir);

#endif /* ST_ENGINE_IO_FILE_IO_H */
