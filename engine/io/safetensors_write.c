/* safetensors_write.c - writes tensors and metadata as one safetensors file, whole or
 * streamed: a stream lays the file out from the tensors' descriptions, and the caller then puts
 * each tensor's bytes in any order and any number of pieces, so a file larger than memory can
 * be written (checkpoints, resharding).
 *
 * The layout is the reference implementation's, so the same tensors give the same bytes: data
 * sorted by dtype in descending alignment, then by name (every tensor then starts aligned to
 * its element size); the header lists __metadata__ first (only when there is some, its keys
 * sorted), then the tensors in data order, as compact JSON padded with spaces to a multiple of
 * 8 bytes. The JSON is printed here rather than by cJSON because offsets must be exact 64-bit
 * integers (cJSON numbers are doubles) and the text must match the reference byte for byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/io/file_io.h"
#include "engine/io/safetensors.h"
#include "engine/io/safetensors_common.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tensor data is written unconverted");

/* Header text under construction. With buf NULL it only counts, so the same code measures the
 * header and then prints it into a buffer of the right size. */
typedef struct json_text {
  char *buf;
  size_t len;
} json_text;

static void put(json_text *text, const char *bytes, size_t n) {
  if (text->buf) memcpy(text->buf + text->len, bytes, n);
  text->len += n;
}

static void put_literal(json_text *text, const char *literal) {
  put(text, literal, strlen(literal));
}

static void put_uint(json_text *text, uint64_t value) {
  char digits[24];
  int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)value);
  put(text, digits, (size_t)n);
}

/* Escapes as serde_json does: the short forms where JSON has them, \u00xx for the other
 * control characters, everything else (UTF-8 included) as it is. */
static void put_string(json_text *text, const char *string) {
  put(text, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)string; *c; c++) {
    char escape[8];
    switch (*c) {
      case '"': put(text, "\\\"", 2); break;
      case '\\': put(text, "\\\\", 2); break;
      case '\b': put(text, "\\b", 2); break;
      case '\f': put(text, "\\f", 2); break;
      case '\n': put(text, "\\n", 2); break;
      case '\r': put(text, "\\r", 2); break;
      case '\t': put(text, "\\t", 2); break;
      default:
        if (*c < 0x20) {
          snprintf(escape, sizeof escape, "\\u%04x", *c);
          put(text, escape, 6);
        } else {
          put(text, (const char *)c, 1);
        }
    }
  }
  put(text, "\"", 1);
}

/* A tensor in data order, with its position in the caller's array. The tensor comes first,
 * so the name comparators of safetensors_common.h apply. */
typedef struct placed_tensor {
  safetensors_tensor t;
  size_t caller;
} placed_tensor;

/* Tensors in data order; each has passed check_tensor. */
static void put_header(json_text *text, const placed_tensor *tensors, size_t tensor_count,
                       const safetensors_metadata *metadata, size_t metadata_count) {
  put_literal(text, "{");
  if (metadata_count) {
    put_literal(text, "\"__metadata__\":{");
    for (size_t i = 0; i < metadata_count; i++) {
      if (i) put_literal(text, ",");
      put_string(text, metadata[i].key);
      put_literal(text, ":");
      put_string(text, metadata[i].value);
    }
    put_literal(text, "}");
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensor_count; i++) {
    const safetensors_tensor *t = &tensors[i].t;
    uint64_t numel, bytes;
    safetensors_shape_size(t->dtype, t->ndim, t->shape, &numel, &bytes);
    if (i || metadata_count) put_literal(text, ",");
    put_string(text, t->name);
    put_literal(text, ":{\"dtype\":");
    put_string(text, safetensors_dtype_name(t->dtype));
    put_literal(text, ",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) put_literal(text, ",");
      put_uint(text, (uint64_t)t->shape[d]);
    }
    put_literal(text, "],\"data_offsets\":[");
    put_uint(text, offset);
    put_literal(text, ",");
    put_uint(text, offset + bytes);
    put_literal(text, "]}");
    offset += bytes;
  }
  put_literal(text, "}");
}

/* Data is checked by the caller (a whole write needs it; a stream is given it later). */
static st_status check_tensor(const char *path, const safetensors_tensor *t) {
  uint64_t numel, bytes;
  if (!t->name || strcmp(t->name, "__metadata__") == 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: a tensor has no name or the reserved name __metadata__", path);
  }
  if ((unsigned)t->dtype >= SAFETENSORS_DTYPE_COUNT) {
    return st_error(ST_ERR_INVALID_ARG, "%s: tensor '%s' has invalid dtype %d", path, t->name,
                    (int)t->dtype);
  }
  if (t->ndim < 0 || t->ndim > SAFETENSORS_MAX_DIMS) {
    return st_error(ST_ERR_INVALID_ARG, "%s: tensor '%s' has %d dimensions; 0 to %d are supported",
                    path, t->name, t->ndim, SAFETENSORS_MAX_DIMS);
  }
  if (!safetensors_shape_size(t->dtype, t->ndim, t->shape, &numel, &bytes)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: tensor '%s' has a negative extent or a size that overflows 64 bits", path,
                    t->name);
  }
  return ST_OK;
}

static int compare_layout(const void *a, const void *b) {
  const safetensors_tensor *x = a, *y = b;
  if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Sorted copies of the caller's arrays: by name to find duplicates, then tensors by layout. */
static st_status sort_inputs(const char *path, placed_tensor *tensors, size_t tensor_count,
                             safetensors_metadata *metadata, size_t metadata_count) {
  qsort(tensors, tensor_count, sizeof *tensors, safetensors_compare_names);
  const char *twice = safetensors_duplicate_name(tensors, tensor_count, sizeof *tensors);
  if (twice) return st_error(ST_ERR_INVALID_ARG, "%s: tensor '%s' is given twice", path, twice);
  qsort(metadata, metadata_count, sizeof *metadata, safetensors_compare_names);
  twice = safetensors_duplicate_name(metadata, metadata_count, sizeof *metadata);
  if (twice) {
    return st_error(ST_ERR_INVALID_ARG, "%s: metadata key '%s' is given twice", path, twice);
  }
  qsort(tensors, tensor_count, sizeof *tensors, compare_layout);
  return ST_OK;
}

struct safetensors_stream {
  atomic_file file;
  size_t count;
  uint64_t *begin, *bytes; /* per tensor in the caller's order: file offset and size of its data */
  uint64_t unwritten;      /* data bytes not put yet */
};

static st_status check_inputs(const char *path, const safetensors_tensor *tensors,
                              size_t tensor_count, const safetensors_metadata *metadata,
                              size_t metadata_count) {
  for (size_t i = 0; i < tensor_count; i++) ST_CHECK(check_tensor(path, &tensors[i]));
  for (size_t i = 0; i < metadata_count; i++) {
    if (!metadata[i].key || !metadata[i].value) {
      return st_error(ST_ERR_INVALID_ARG, "%s: metadata entry %zu has no key or value", path, i);
    }
  }
  return ST_OK;
}

/* Builds the header (8-byte length + padded JSON) and places every tensor's data after it. */
static st_status lay_out(safetensors_stream *s, const char *path, placed_tensor *sorted,
                         safetensors_metadata *keys, size_t metadata_count, char **header,
                         size_t *header_bytes) {
  ST_CHECK(sort_inputs(path, sorted, s->count, keys, metadata_count));
  json_text text = {NULL, 0};
  put_header(&text, sorted, s->count, keys, metadata_count);
  size_t json_bytes = (text.len + 7) / 8 * 8;
  ST_CHECK(mem_alloc((void **)header, 8 + json_bytes, MEM_HOST, MEM_WORKSPACE, NULL));
  for (int i = 0; i < 8; i++) (*header)[i] = (char)(((uint64_t)json_bytes >> (8 * i)) & 0xff);
  text = (json_text){*header + 8, 0};
  put_header(&text, sorted, s->count, keys, metadata_count);
  memset(*header + 8 + text.len, ' ', json_bytes - text.len);
  *header_bytes = 8 + json_bytes;
  uint64_t at = *header_bytes;
  for (size_t i = 0; i < s->count; i++) {
    uint64_t numel, bytes;
    safetensors_shape_size(sorted[i].t.dtype, sorted[i].t.ndim, sorted[i].t.shape, &numel, &bytes);
    s->begin[sorted[i].caller] = at;
    s->bytes[sorted[i].caller] = bytes;
    at += bytes;
    s->unwritten += bytes;
  }
  return ST_OK;
}

static void stream_free(safetensors_stream *s) {
  mem_free(s->bytes);
  mem_free(s->begin);
  mem_free(s);
}

st_status safetensors_stream_open(safetensors_stream **out, const char *path,
                                  const safetensors_tensor *tensors, size_t tensor_count,
                                  const safetensors_metadata *metadata, size_t metadata_count) {
  *out = NULL;
  ST_CHECK(check_inputs(path, tensors, tensor_count, metadata, metadata_count));
  safetensors_stream *s = NULL;
  placed_tensor *sorted = NULL;
  safetensors_metadata *keys = NULL;
  char *header = NULL;
  size_t header_bytes = 0;
  st_status status;
  ST_CHECK(mem_alloc((void **)&s, sizeof *s, MEM_HOST, MEM_WORKSPACE, NULL));
  *s = (safetensors_stream){.count = tensor_count};
  const size_t n = tensor_count ? tensor_count : 1;
  ST_CHECK_GOTO(mem_alloc((void **)&s->begin, n * sizeof *s->begin, MEM_HOST, MEM_WORKSPACE, NULL),
                status, fail);
  ST_CHECK_GOTO(mem_alloc((void **)&s->bytes, n * sizeof *s->bytes, MEM_HOST, MEM_WORKSPACE, NULL),
                status, fail);
  ST_CHECK_GOTO(mem_alloc((void **)&sorted, n * sizeof *sorted, MEM_HOST, MEM_WORKSPACE, NULL),
                status, fail);
  ST_CHECK_GOTO(mem_alloc((void **)&keys, (metadata_count ? metadata_count : 1) * sizeof *keys,
                          MEM_HOST, MEM_WORKSPACE, NULL),
                status, fail);
  for (size_t i = 0; i < tensor_count; i++) sorted[i] = (placed_tensor){tensors[i], i};
  if (metadata_count) memcpy(keys, metadata, metadata_count * sizeof *keys);
  ST_CHECK_GOTO(lay_out(s, path, sorted, keys, metadata_count, &header, &header_bytes), status,
                fail);
  ST_CHECK_GOTO(atomic_file_create(&s->file, path), status, fail);
  status = atomic_file_write(&s->file, header, header_bytes);
  if (status != ST_OK) {
    atomic_file_finish(&s->file, status);
    goto fail;
  }
  mem_free(header);
  mem_free(keys);
  mem_free(sorted);
  *out = s;
  return ST_OK;
fail:
  mem_free(header);
  mem_free(keys);
  mem_free(sorted);
  stream_free(s);
  return status;
}

st_status safetensors_stream_put(safetensors_stream *s, size_t index, uint64_t first_byte,
                                 const void *data, size_t bytes) {
  if (index >= s->count || first_byte > s->bytes[index] || bytes > s->bytes[index] - first_byte) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: %zu bytes at %llu do not fit tensor %zu of this stream", s->file.path,
                    bytes, (unsigned long long)first_byte, index);
  }
  ST_CHECK(atomic_file_write_at(&s->file, data, bytes, s->begin[index] + first_byte));
  s->unwritten -= bytes < s->unwritten ? bytes : s->unwritten;
  return ST_OK;
}

st_status safetensors_stream_finish(safetensors_stream *s, st_status status) {
  if (!s) return status;
  if (status == ST_OK && s->unwritten) {
    status = st_error(ST_ERR_INTERNAL, "%s: %llu bytes of tensor data were never written",
                      s->file.path, (unsigned long long)s->unwritten);
  }
  status = atomic_file_finish(&s->file, status);
  stream_free(s);
  return status;
}

/* The bytes written between two extensions of a write's deadline. */
#define WRITE_CHUNK_BYTES ((size_t)1 << 20)

st_status safetensors_write_extending(const char *path, const safetensors_tensor *tensors,
                                      size_t tensor_count, const safetensors_metadata *metadata,
                                      size_t metadata_count, deadline *stall) {
  for (size_t i = 0; i < tensor_count; i++) {
    uint64_t numel, bytes;
    ST_CHECK(check_tensor(path, &tensors[i]));
    safetensors_shape_size(tensors[i].dtype, tensors[i].ndim, tensors[i].shape, &numel, &bytes);
    if (bytes && !tensors[i].data) {
      return st_error(ST_ERR_INVALID_ARG, "%s: tensor '%s' has no data", path, tensors[i].name);
    }
  }
  safetensors_stream *s = NULL;
  ST_CHECK(safetensors_stream_open(&s, path, tensors, tensor_count, metadata, metadata_count));
  st_status status = ST_OK;
  for (size_t i = 0; i < tensor_count && status == ST_OK; i++) {
    const char *data = tensors[i].data;
    const size_t bytes = (size_t)s->bytes[i];
    for (size_t at = 0; at < bytes && status == ST_OK; at += WRITE_CHUNK_BYTES) {
      const size_t n = bytes - at < WRITE_CHUNK_BYTES ? bytes - at : WRITE_CHUNK_BYTES;
      status = safetensors_stream_put(s, i, at, data + at, n);
      if (stall) deadline_extend(stall);
    }
  }
  return safetensors_stream_finish(s, status);
}

st_status safetensors_write(const char *path, const safetensors_tensor *tensors,
                            size_t tensor_count, const safetensors_metadata *metadata,
                            size_t metadata_count) {
  return safetensors_write_extending(path, tensors, tensor_count, metadata, metadata_count, NULL);
}
