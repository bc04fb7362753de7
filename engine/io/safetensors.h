/* safetensors.h - reading and writing the safetensors format (Hugging Face).
 *
 * A file is: an 8-byte little-endian header length N; N bytes of JSON,
 *   {"__metadata__": {"key": "value", ...},
 *    "<name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
 * padded with spaces; then the data region, where each tensor's row-major little-endian bytes
 * are [begin, end) (offsets relative to the region's start). docs/FORMATS.md has the rules.
 *
 * The reader validates the whole header when it opens a file (like the reference
 * implementation: the tensors, sorted by offset, tile the data region exactly), so every later
 * call can trust it; malformed input is ST_ERR_FORMAT with the file name and the fault. Data is
 * read on request with positioned reads, whole tensors or a contiguous range of elements.
 * The writer lays a file out exactly as the reference implementation does, byte for byte.
 * Data pointers are host memory. Both assume a little-endian host.
 */
#ifndef ST_ENGINE_IO_SAFETENSORS_H
#define ST_ENGINE_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/deadline.h"
#include "shardtrain.h"

/* In the reference implementation's order, which is increasing alignment: the writer sorts by
 * it (descending) so every tensor's data is aligned to its element size. */
typedef enum safetensors_dtype {
  SAFETENSORS_BOOL = 0,
  SAFETENSORS_U8,
  SAFETENSORS_I8,
  SAFETENSORS_F8_E5M2,
  SAFETENSORS_F8_E4M3,
  SAFETENSORS_I16,
  SAFETENSORS_U16,
  SAFETENSORS_F16,
  SAFETENSORS_BF16,
  SAFETENSORS_I32,
  SAFETENSORS_U32,
  SAFETENSORS_F32,
  SAFETENSORS_F64,
  SAFETENSORS_I64,
  SAFETENSORS_U64,
  SAFETENSORS_DTYPE_COUNT
} safetensors_dtype;

/* Header spelling ("F32"), or "invalid". */
const char *safetensors_dtype_name(safetensors_dtype dtype);
/* Bytes per element, or 0 for an invalid value. */
size_t safetensors_dtype_size(safetensors_dtype dtype);

/* More dimensions than any model here uses; a file with more is ST_ERR_UNSUPPORTED. */
#define SAFETENSORS_MAX_DIMS 8

/* One tensor as the header describes it. ndim 0 is a scalar (one element). */
typedef struct safetensors_entry {
  const char *name;
  safetensors_dtype dtype;
  int ndim;
  int64_t shape[SAFETENSORS_MAX_DIMS];
  uint64_t numel;
  uint64_t data_begin, data_end; /* byte range in the data region */
} safetensors_entry;

/* ---- Reader -------------------------------------------------------------------------------- */

typedef struct safetensors_reader safetensors_reader;

/* Opens `path` and validates its header. The file stays open until close. */
st_status safetensors_reader_open(safetensors_reader **out, const char *path);
void safetensors_reader_close(safetensors_reader *reader);

/* The tensors, sorted by name (byte order); valid until close. */
size_t safetensors_reader_count(const safetensors_reader *reader);
const safetensors_entry *safetensors_reader_entry(const safetensors_reader *reader, size_t index);

/* The tensor called `name`, or NULL. */
const safetensors_entry *safetensors_reader_find(const safetensors_reader *reader,
                                                 const char *name);

/* Copies elements [first, first + count) of the tensor (row-major order) into `dst`, which holds
 * count * safetensors_dtype_size(entry->dtype) bytes. A range past the tensor's end is
 * ST_ERR_INVALID_ARG. `entry` comes from this reader. */
st_status safetensors_reader_read(const safetensors_reader *reader, const safetensors_entry *entry,
                                  uint64_t first, uint64_t count, void *dst);

/* The __metadata__ value for `key`, or NULL; valid until close. */
const char *safetensors_reader_metadata(const safetensors_reader *reader, const char *key);

/* ---- Writer -------------------------------------------------------------------------------- */

/* A tensor to write: `name` and `data` (numel * dtype size bytes) are borrowed for the call. */
typedef struct safetensors_tensor {
  const char *name;
  safetensors_dtype dtype;
  int ndim;
  int64_t shape[SAFETENSORS_MAX_DIMS];
  const void *data;
} safetensors_tensor;

typedef struct safetensors_metadata {
  const char *key;
  const char *value;
} safetensors_metadata;

/* Writes the tensors and metadata (pass 0 and NULL for none) to `path`, in the reference
 * layout whatever the order given, through a temporary file that is fsynced and renamed into
 * place, so `path` holds either its previous content or the complete new file. Duplicate names
 * or keys, the reserved name "__metadata__", and bad dtypes or shapes are ST_ERR_INVALID_ARG. */
st_status safetensors_write(const char *path, const safetensors_tensor *tensors,
                            size_t tensor_count, const safetensors_metadata *metadata,
                            size_t metadata_count);

/* safetensors_write, extending `stall` (armed, core/deadline.h) after each MiB written, so its
 * limit bounds a stall of the file system rather than the whole write. */
st_status safetensors_write_extending(const char *path, const safetensors_tensor *tensors,
                                      size_t tensor_count, const safetensors_metadata *metadata,
                                      size_t metadata_count, deadline *stall);

/* A file written in pieces: opened from the tensors' descriptions (their `data` is ignored),
 * which fixes the layout and writes the header; then every byte of every tensor is put, in any
 * order; then finished (fsync, rename) or, with an error status, abandoned leaving `path` as it
 * was. Finishing with bytes never put is ST_ERR_INTERNAL. Overlapping puts are the caller's
 * mistake and are not detected. */
typedef struct safetensors_stream safetensors_stream;

st_status safetensors_stream_open(safetensors_stream **out, const char *path,
                                  const safetensors_tensor *tensors, size_t tensor_count,
                                  const safetensors_metadata *metadata, size_t metadata_count);

/* Writes `bytes` of tensor `index` (its position in the array given to open), starting at byte
 * `first_byte` of its data. */
st_status safetensors_stream_put(safetensors_stream *s, size_t index, uint64_t first_byte,
                                 const void *data, size_t bytes);

/* Ends the stream with `status` (ST_OK to keep the file); releases it in every case. NULL is
 * allowed and returns status. */
st_status safetensors_stream_finish(safetensors_stream *s, st_status status);

#endif /* ST_ENGINE_IO_SAFETENSORS_H */
