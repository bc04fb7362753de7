/* safetensors_read.c - opens a safetensors file, validates its whole header once, and reads
 * tensor data on request.
 *
 * Ownership: the reader owns its descriptor and three MEM_WORKSPACE blocks (the entry table,
 * the metadata table, and one string pool holding the path, names, keys and values). The
 * header text and its cJSON tree live only inside safetensors_reader_open. cJSON allocates its
 * tree with malloc: its allocation hooks are process-wide, and installing ours would capture
 * the cJSON use of whatever program links this library.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/io/file_io.h"
#include "engine/io/json_check.h"
#include "engine/io/safetensors.h"
#include "engine/io/safetensors_common.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tensor data is copied unconverted");

/* The reference implementation's limit; it keeps a forged length from making us allocate as
 * much memory as the file is large. */
#define HEADER_MAX_BYTES 100000000ull
/* Every integer up to 2^53 is exact in the double cJSON stores a number in. */
#define JSON_EXACT_INT_MAX 9007199254740992.0

struct safetensors_reader {
  const char *path; /* in `strings` */
  int fd;
  uint64_t data_start; /* file offset of the data region: 8 + header length */
  size_t entry_count;
  safetensors_entry *entries; /* sorted by name */
  size_t metadata_count;
  safetensors_metadata *metadata; /* sorted by key */
  char *strings;
};

/* Bump allocation of strings inside the reader's pool. */
typedef struct string_pool {
  char *next;
  size_t left;
} string_pool;

static st_status pool_copy(string_pool *pool, const char *text, const char **out) {
  size_t bytes = strlen(text) + 1;
  if (bytes > pool->left) return st_error(ST_ERR_INTERNAL, "safetensors string pool too small");
  memcpy(pool->next, text, bytes);
  *out = pool->next;
  pool->next += bytes;
  pool->left -= bytes;
  return ST_OK;
}

static int json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item)) return 0;
  double value = item->valuedouble;
  if (!(value >= 0.0 && value <= JSON_EXACT_INT_MAX) || value != floor(value)) return 0;
  *out = (uint64_t)value;
  return 1;
}

static st_status read_header_length(const safetensors_reader *reader, uint64_t file_size,
                                    uint64_t *header_bytes) {
  const char *path = reader->path;
  if (file_size < 8) {
    return st_error(ST_ERR_FORMAT, "%s: file has %llu bytes, fewer than the 8-byte header length",
                    path, (unsigned long long)file_size);
  }
  unsigned char raw[8];
  ST_CHECK(file_read_at(reader->fd, path, raw, sizeof raw, 0));
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | raw[i];
  if (n > HEADER_MAX_BYTES) {
    return st_error(ST_ERR_FORMAT, "%s: header length %llu exceeds the limit of %llu bytes", path,
                    (unsigned long long)n, HEADER_MAX_BYTES);
  }
  if (n > file_size - 8) {
    return st_error(ST_ERR_FORMAT, "%s: header length %llu exceeds the %llu bytes after it", path,
                    (unsigned long long)n, (unsigned long long)(file_size - 8));
  }
  *header_bytes = n;
  return ST_OK;
}

static st_status parse_dtype(const char *path, const char *name, const cJSON *item,
                             safetensors_dtype *out) {
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  if (!cJSON_IsString(dtype)) {
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' has no \"dtype\" string", path, name);
  }
  for (int d = 0; d < SAFETENSORS_DTYPE_COUNT; d++) {
    if (strcmp(dtype->valuestring, safetensors_dtype_name((safetensors_dtype)d)) == 0) {
      *out = (safetensors_dtype)d;
      return ST_OK;
    }
  }
  return st_error(ST_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", path, name,
                  dtype->valuestring);
}

static st_status parse_shape(const char *path, const char *name, const cJSON *item,
                             safetensors_entry *entry) {
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  if (!cJSON_IsArray(shape)) {
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' has no \"shape\" array", path, name);
  }
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > SAFETENSORS_MAX_DIMS) {
    return st_error(ST_ERR_UNSUPPORTED,
                    "%s: tensor '%s' has %d dimensions; at most %d are supported", path, name, ndim,
                    SAFETENSORS_MAX_DIMS);
  }
  entry->ndim = ndim;
  const cJSON *dim;
  int d = 0;
  cJSON_ArrayForEach(dim, shape) {
    uint64_t extent;
    if (!json_uint(dim, &extent)) {
      return st_error(ST_ERR_FORMAT, "%s: tensor '%s' shape[%d] is not an integer in [0, 2^53]",
                      path, name, d);
    }
    entry->shape[d++] = (int64_t)extent;
  }
  return ST_OK;
}

static st_status parse_offsets(const char *path, const char *name, const cJSON *item,
                               safetensors_entry *entry) {
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
      !json_uint(cJSON_GetArrayItem(offsets, 0), &entry->data_begin) ||
      !json_uint(cJSON_GetArrayItem(offsets, 1), &entry->data_end)) {
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s' has no \"data_offsets\" array of two integers in [0, 2^53]",
                    path, name);
  }
  return ST_OK;
}

/* Fills `entry` from one tensor's header object and checks it on its own; how the tensors
 * share the data region is check_layout's job. */
static st_status parse_entry(const safetensors_reader *reader, const cJSON *item,
                             uint64_t data_size, safetensors_entry *entry) {
  const char *path = reader->path, *name = entry->name;
  if (!cJSON_IsObject(item)) {
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", path, name);
  }
  const char *twice = NULL; /* the reference implementation refuses a field given twice */
  ST_CHECK(json_find_duplicate_key(item, &twice));
  if (twice) {
    return st_error(ST_ERR_FORMAT, "%s: tensor '%s' has the field \"%s\" twice", path, name, twice);
  }
  ST_CHECK(parse_dtype(path, name, item, &entry->dtype));
  ST_CHECK(parse_shape(path, name, item, entry));
  ST_CHECK(parse_offsets(path, name, item, entry));
  uint64_t begin = entry->data_begin, end = entry->data_end, bytes;
  if (!safetensors_shape_size(entry->dtype, entry->ndim, entry->shape, &entry->numel, &bytes)) {
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s' shape and dtype %s give a size that overflows 64 bits", path,
                    name, safetensors_dtype_name(entry->dtype));
  }
  if (begin > end) {
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s' data_offsets [%llu, %llu] end before they begin", path, name,
                    (unsigned long long)begin, (unsigned long long)end);
  }
  if (end > data_size) {
    return st_error(
        ST_ERR_FORMAT, "%s: tensor '%s' data_offsets [%llu, %llu] exceed the data size %llu", path,
        name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
  }
  if (end - begin != bytes) {
    return st_error(ST_ERR_FORMAT,
                    "%s: tensor '%s' data_offsets [%llu, %llu] span %llu bytes "
                    "but its shape and dtype %s need %llu",
                    path, name, (unsigned long long)begin, (unsigned long long)end,
                    (unsigned long long)(end - begin), safetensors_dtype_name(entry->dtype),
                    (unsigned long long)bytes);
  }
  return ST_OK;
}

static int compare_offsets(const void *a, const void *b) {
  const safetensors_entry *x = *(const safetensors_entry *const *)a;
  const safetensors_entry *y = *(const safetensors_entry *const *)b;
  if (x->data_begin != y->data_begin) return x->data_begin < y->data_begin ? -1 : 1;
  if (x->data_end != y->data_end) return x->data_end < y->data_end ? -1 : 1;
  return 0;
}

/* As the reference implementation requires: sorted by offset, the tensors tile the data region
 * with no gap and no overlap, so every data byte belongs to exactly one tensor. */
static st_status check_layout(const safetensors_reader *reader, uint64_t data_size) {
  const safetensors_entry **order = NULL;
  ST_CHECK(mem_alloc((void **)&order, reader->entry_count * sizeof *order, MEM_HOST, MEM_WORKSPACE,
                     NULL));
  for (size_t i = 0; i < reader->entry_count; i++) order[i] = &reader->entries[i];
  qsort(order, reader->entry_count, sizeof *order, compare_offsets);
  st_status status = ST_OK;
  uint64_t covered = 0;
  const char *previous = NULL;
  for (size_t i = 0; i < reader->entry_count && status == ST_OK; i++) {
    const safetensors_entry *e = order[i];
    if (e->data_begin < covered) {
      status = st_error(ST_ERR_FORMAT,
                        "%s: tensor '%s' data_offsets [%llu, %llu] overlap tensor "
                        "'%s', which ends at %llu",
                        reader->path, e->name, (unsigned long long)e->data_begin,
                        (unsigned long long)e->data_end, previous, (unsigned long long)covered);
    } else if (e->data_begin > covered) {
      status = st_error(
          ST_ERR_FORMAT, "%s: data bytes [%llu, %llu) before tensor '%s' belong to no tensor",
          reader->path, (unsigned long long)covered, (unsigned long long)e->data_begin, e->name);
    }
    covered = e->data_end;
    previous = e->name;
  }
  if (status == ST_OK && covered != data_size) {
    status = st_error(ST_ERR_FORMAT, "%s: data bytes [%llu, %llu) at the end belong to no tensor",
                      reader->path, (unsigned long long)covered, (unsigned long long)data_size);
  }
  mem_free(order);
  return status;
}

static st_status load_metadata(safetensors_reader *reader, const cJSON *object, string_pool *pool) {
  if (!cJSON_IsObject(object)) {
    return st_error(ST_ERR_FORMAT, "%s: __metadata__ is not a JSON object", reader->path);
  }
  const cJSON *item;
  cJSON_ArrayForEach(item, object) {
    if (!cJSON_IsString(item)) {
      return st_error(ST_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", reader->path,
                      item->string);
    }
    safetensors_metadata *pair = &reader->metadata[reader->metadata_count++];
    ST_CHECK(pool_copy(pool, item->string, &pair->key));
    ST_CHECK(pool_copy(pool, item->valuestring, &pair->value));
  }
  qsort(reader->metadata, reader->metadata_count, sizeof *reader->metadata,
        safetensors_compare_names);
  const char *twice = safetensors_duplicate_name(reader->metadata, reader->metadata_count,
                                                 sizeof *reader->metadata);
  if (twice) {
    return st_error(ST_ERR_FORMAT, "%s: __metadata__ key '%s' appears twice", reader->path, twice);
  }
  return ST_OK;
}

/* Counts before allocating: the tables are sized exactly, the pool by the header length, which
 * bounds the strings because each one appears in the header text, quoted, and unescaping
 * never makes a string longer. */
static st_status load_header(safetensors_reader *reader, const char *path, const cJSON *root,
                             uint64_t header_bytes, uint64_t data_size) {
  const cJSON *metadata = NULL, *item;
  size_t tensors = 0;
  cJSON_ArrayForEach(item, root) {
    if (strcmp(item->string, "__metadata__") != 0) {
      tensors++;
    } else if (metadata) {
      return st_error(ST_ERR_FORMAT, "%s: header has two __metadata__ objects", path);
    } else {
      metadata = item;
    }
  }
  size_t pairs = metadata ? (size_t)cJSON_GetArraySize(metadata) : 0;
  size_t pool_bytes = header_bytes + strlen(path) + 1;
  ST_CHECK(mem_alloc((void **)&reader->strings, pool_bytes, MEM_HOST, MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc((void **)&reader->entries, tensors * sizeof *reader->entries, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  ST_CHECK(mem_alloc((void **)&reader->metadata, pairs * sizeof *reader->metadata, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  string_pool pool = {reader->strings, pool_bytes};
  ST_CHECK(pool_copy(&pool, path, &reader->path));
  if (metadata) ST_CHECK(load_metadata(reader, metadata, &pool));
  cJSON_ArrayForEach(item, root) {
    if (item == metadata) continue;
    safetensors_entry *entry = &reader->entries[reader->entry_count++];
    memset(entry, 0, sizeof *entry);
    ST_CHECK(pool_copy(&pool, item->string, &entry->name));
    ST_CHECK(parse_entry(reader, item, data_size, entry));
  }
  qsort(reader->entries, reader->entry_count, sizeof *reader->entries, safetensors_compare_names);
  const char *twice =
      safetensors_duplicate_name(reader->entries, reader->entry_count, sizeof *reader->entries);
  if (twice) return st_error(ST_ERR_FORMAT, "%s: tensor '%s' appears twice", path, twice);
  return check_layout(reader, data_size);
}

st_status safetensors_reader_open(safetensors_reader **out, const char *path) {
  *out = NULL;
  safetensors_reader *reader = NULL;
  char *text = NULL;
  cJSON *root = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&reader, sizeof *reader, MEM_HOST, MEM_WORKSPACE, NULL));
  reader->fd = -1;
  reader->path = path; /* until load_header copies it into the pool */
  st_status status;
  uint64_t file_size = 0, header_bytes = 0;
  ST_CHECK_GOTO(file_open_read(path, &reader->fd, &file_size), status, fail);
  ST_CHECK_GOTO(read_header_length(reader, file_size, &header_bytes), status, fail);
  reader->data_start = 8 + header_bytes;
  ST_CHECK_GOTO(mem_alloc((void **)&text, header_bytes + 1, MEM_HOST, MEM_WORKSPACE, NULL), status,
                fail);
  ST_CHECK_GOTO(file_read_at(reader->fd, path, text, header_bytes, 8), status, fail);
  text[header_bytes] = '\0';
  ST_CHECK_GOTO(json_read_object(text, header_bytes, path, "header", &root), status, fail);
  ST_CHECK_GOTO(load_header(reader, path, root, header_bytes, file_size - reader->data_start),
                status, fail);
  cJSON_Delete(root);
  mem_free(text);
  *out = reader;
  return ST_OK;
fail:
  cJSON_Delete(root);
  mem_free(text);
  safetensors_reader_close(reader);
  return status;
}

void safetensors_reader_close(safetensors_reader *reader) {
  if (!reader) return;
  mem_free(reader->metadata);
  mem_free(reader->entries);
  mem_free(reader->strings);
  if (reader->fd >= 0) close(reader->fd);
  mem_free(reader);
}

size_t safetensors_reader_count(const safetensors_reader *reader) { return reader->entry_count; }

const safetensors_entry *safetensors_reader_entry(const safetensors_reader *reader, size_t index) {
  return index < reader->entry_count ? &reader->entries[index] : NULL;
}

const safetensors_entry *safetensors_reader_find(const safetensors_reader *reader,
                                                 const char *name) {
  return bsearch(&name, reader->entries, reader->entry_count, sizeof *reader->entries,
                 safetensors_compare_names);
}

st_status safetensors_reader_read(const safetensors_reader *reader, const safetensors_entry *entry,
                                  uint64_t first, uint64_t count, void *dst) {
  if (first > entry->numel || count > entry->numel - first) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: %llu elements from element %llu are outside tensor '%s' of %llu elements",
                    reader->path, (unsigned long long)count, (unsigned long long)first, entry->name,
                    (unsigned long long)entry->numel);
  }
  size_t element = safetensors_dtype_size(entry->dtype);
  return file_read_at(reader->fd, reader->path, dst, (size_t)(count * element),
                      reader->data_start + entry->data_begin + first * element);
}

const char *safetensors_reader_metadata(const safetensors_reader *reader, const char *key) {
  const safetensors_metadata *pair = bsearch(&key, reader->metadata, reader->metadata_count,
                                             sizeof *reader->metadata, safetensors_compare_names);
  return pair ? pair->value : NULL;
}
