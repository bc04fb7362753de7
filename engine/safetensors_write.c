/* safetensors_write.c - writes tensors and metadata as one safetensors file.
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
#include "engine/file_io.h"
#include "engine/safetensors.h"
#include "engine/safetensors_common.h"

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

/* Tensors in data order; each has passed check_tensor. */
static void put_header(json_text *text, const safetensors_tensor *tensors, size_t tensor_count,
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
    const safetensors_tensor *t = &tensors[i];
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
  if (bytes && !t->data) {
    return st_error(ST_ERR_INVALID_ARG, "%s: tensor '%s' has no data", path, t->name);
  }
  return ST_OK;
}

static int compare_layout(const void *a, const void *b) {
  const safetensors_tensor *x = a, *y = b;
  if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Sorted copies of the caller's arrays: by name to find duplicates, then tensors by layout. */
static st_status sort_inputs(const char *path, safetensors_tensor *tensors, size_t tensor_count,
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

static st_status write_file(const char *path, const char *header, size_t header_bytes,
                            const safetensors_tensor *tensors, size_t tensor_count) {
  atomic_file file;
  ST_CHECK(atomic_file_create(&file, path));
  st_status status = atomic_file_write(&file, header, header_bytes);
  for (size_t i = 0; i < tensor_count && status == ST_OK; i++) {
    uint64_t numel, bytes;
    safetensors_shape_size(tensors[i].dtype, tensors[i].ndim, tensors[i].shape, &numel, &bytes);
    status = atomic_file_write(&file, tensors[i].data, (size_t)bytes);
  }
  return atomic_file_finish(&file, status);
}

st_status safetensors_write(const char *path, const safetensors_tensor *tensors,
                            size_t tensor_count, const safetensors_metadata *metadata,
                            size_t metadata_count) {
  for (size_t i = 0; i < tensor_count; i++) ST_CHECK(check_tensor(path, &tensors[i]));
  for (size_t i = 0; i < metadata_count; i++) {
    if (!metadata[i].key || !metadata[i].value) {
      return st_error(ST_ERR_INVALID_ARG, "%s: metadata entry %zu has no key or value", path, i);
    }
  }
  safetensors_tensor *sorted = NULL;
  safetensors_metadata *keys = NULL;
  char *header = NULL;
  st_status status;
  ST_CHECK_GOTO(
      mem_alloc((void **)&sorted, tensor_count * sizeof *sorted, MEM_HOST, MEM_WORKSPACE, NULL),
      status, done);
  ST_CHECK_GOTO(
      mem_alloc((void **)&keys, metadata_count * sizeof *keys, MEM_HOST, MEM_WORKSPACE, NULL),
      status, done);
  if (tensor_count) memcpy(sorted, tensors, tensor_count * sizeof *sorted);
  if (metadata_count) memcpy(keys, metadata, metadata_count * sizeof *keys);
  ST_CHECK_GOTO(sort_inputs(path, sorted, tensor_count, keys, metadata_count), status, done);

  json_text text = {NULL, 0};
  put_header(&text, sorted, tensor_count, keys, metadata_count);
  size_t json_bytes = (text.len + 7) / 8 * 8;
  ST_CHECK_GOTO(mem_alloc((void **)&header, 8 + json_bytes, MEM_HOST, MEM_WORKSPACE, NULL), status,
                done);
  for (int i = 0; i < 8; i++) header[i] = (char)(((uint64_t)json_bytes >> (8 * i)) & 0xff);
  text = (json_text){header + 8, 0};
  put_header(&text, sorted, tensor_count, keys, metadata_count);
  memset(header + 8 + text.len, ' ', json_bytes - text.len);
  status = write_file(path, header, 8 + json_bytes, sorted, tensor_count);
done:
  mem_free(header);
  mem_free(keys);
  mem_free(sorted);
  return status;
}
