/* safetensors_roundtrip_test - proves that what the writer writes, the reader reads back.
 *
 * Seven tensors of seven dtypes (a scalar and an empty tensor among them) and three metadata
 * keys are written, then (1) the file's raw bytes are checked against an independent
 * description written out by hand here: the 8-byte little-endian length, the exact JSON text
 * with its offsets, the space padding to a multiple of 8, and the data region as the
 * concatenation of the inputs in layout order; (2) the reader lists the tensors in name order
 * with the right dtype, shape and element count, reads each back byte for byte, reads every
 * element range of a tensor, refuses a range past the end, and returns the metadata; (3) a file
 * with nothing in it is the reference's 16 bytes. Nothing leaks.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/io/safetensors.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

static const float b_f32[6] = {1.5f, -2, 3, 4.25f, -0.0f, 1e30f};
static const uint16_t a_bf16[4] = {0x3f80, 0x4000, 0xbf80, 0x7fc0};
static const uint16_t c_f16[2] = {0x3c00, 0xfbff};
static const int32_t d_i32[1] = {-123456};
static const uint8_t e_u8[5] = {0, 1, 127, 128, 255};
static const int64_t f_i64[2] = {-1, 9007199254740993};

static const safetensors_tensor tensors[] = {
    {"b", SAFETENSORS_F32, 2, {2, 3}, b_f32},    {"a", SAFETENSORS_BF16, 1, {4}, a_bf16},
    {"c", SAFETENSORS_F16, 3, {1, 2, 1}, c_f16}, {"d", SAFETENSORS_I32, 0, {0}, d_i32},
    {"e", SAFETENSORS_U8, 1, {5}, e_u8},         {"f", SAFETENSORS_I64, 1, {2}, f_i64},
    {"g", SAFETENSORS_F64, 1, {0}, NULL},
};
#define TENSOR_COUNT (sizeof tensors / sizeof tensors[0])

static const safetensors_metadata metadata[] = {{"zeta", "last"}, {"format", "pt"}, {"step", "42"}};

/* What the file must hold, worked out by hand: data ordered by dtype (I64, F64, F32, I32, BF16,
 * F16, U8, the reference's descending alignment), metadata keys sorted. */
static const char expected_json[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"42\",\"zeta\":\"last\"},"
    "\"f\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
    "\"g\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[16,16]},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[16,40]},"
    "\"d\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[40,44]},"
    "\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[44,52]},"
    "\"c\":{\"dtype\":\"F16\",\"shape\":[1,2,1],\"data_offsets\":[52,56]},"
    "\"e\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[56,61]}}";
static const char expected_data_order[] = "fgbdace";

static const safetensors_tensor *input_named(char name) {
  for (size_t i = 0; i < TENSOR_COUNT; i++) {
    if (tensors[i].name[0] == name) return &tensors[i];
  }
  return NULL;
}

static size_t input_bytes(const safetensors_tensor *t) {
  size_t n = safetensors_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

static void check_raw_layout(const char *path) {
  size_t size = 0;
  unsigned char *file = test_read_file(path, &size);
  if (!CHECK(file != NULL && size >= 8)) {
    free(file);
    return;
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; i++) header_len |= (uint64_t)file[i] << (8 * i);
  size_t json_len = strlen(expected_json);
  CHECK_EQ_INT(header_len, (json_len + 7) / 8 * 8);
  CHECK_EQ_INT(header_len % 8, 0);
  if (!CHECK(8 + header_len <= size)) {
    free(file);
    return;
  }
  CHECK_MSG(memcmp(file + 8, expected_json, json_len) == 0, "header text: %.*s", (int)header_len,
            (const char *)file + 8);
  for (size_t i = json_len; i < header_len; i++) CHECK_EQ_INT(file[8 + i], ' ');
  size_t offset = 8 + header_len;
  for (const char *name = expected_data_order; *name; name++) {
    const safetensors_tensor *t = input_named(*name);
    size_t bytes = input_bytes(t);
    if (!CHECK(offset + bytes <= size)) break;
    CHECK_MSG(bytes == 0 || memcmp(file + offset, t->data, bytes) == 0, "data of %s", t->name);
    offset += bytes;
  }
  CHECK_EQ_INT(offset, size);
  free(file);
}

static void check_reads_back(const char *path) {
  safetensors_reader *reader = NULL;
  CHECK_OK(safetensors_reader_open(&reader, path));
  if (!reader) return;
  CHECK_EQ_INT(safetensors_reader_count(reader), TENSOR_COUNT);
  for (size_t i = 0; i < safetensors_reader_count(reader); i++) {
    const safetensors_entry *entry = safetensors_reader_entry(reader, i);
    CHECK_EQ_INT(entry->name[0], 'a' + (int)i); /* listed in name order */
    const safetensors_tensor *want = input_named(entry->name[0]);
    CHECK_EQ_INT(entry->dtype, want->dtype);
    CHECK_EQ_INT(entry->ndim, want->ndim);
    uint64_t numel = 1;
    for (int d = 0; d < want->ndim; d++) {
      CHECK_EQ_INT(entry->shape[d], want->shape[d]);
      numel *= (uint64_t)want->shape[d];
    }
    CHECK_EQ_INT(entry->numel, numel);
    CHECK_EQ_INT(entry->data_end - entry->data_begin, input_bytes(want));
    CHECK(safetensors_reader_find(reader, entry->name) == entry);
    unsigned char buffer[64];
    memset(buffer, 0xee, sizeof buffer);
    CHECK_OK(safetensors_reader_read(reader, entry, 0, numel, buffer));
    CHECK_MSG(numel == 0 || memcmp(buffer, want->data, input_bytes(want)) == 0, "%s", want->name);
  }
  CHECK(safetensors_reader_find(reader, "nope") == NULL);
  CHECK(safetensors_reader_entry(reader, TENSOR_COUNT) == NULL);

  /* Every element range of b, as a rank reading only its piece would. */
  const safetensors_entry *b = safetensors_reader_find(reader, "b");
  for (uint64_t first = 0; first <= 6; first++) {
    for (uint64_t count = 0; first + count <= 6; count++) {
      float piece[6] = {0};
      CHECK_OK(safetensors_reader_read(reader, b, first, count, piece));
      CHECK_MSG(memcmp(piece, b_f32 + first, count * sizeof(float)) == 0, "b[%llu:+%llu]",
                (unsigned long long)first, (unsigned long long)count);
    }
  }
  float spare[8];
  CHECK_STATUS(safetensors_reader_read(reader, b, 5, 2, spare), ST_ERR_INVALID_ARG);
  CHECK_STATUS(safetensors_reader_read(reader, b, 7, 0, spare), ST_ERR_INVALID_ARG);
  CHECK_STATUS(safetensors_reader_read(reader, b, 1, UINT64_MAX, spare), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "tensor 'b' of 6 elements") != NULL);

  for (size_t i = 0; i < sizeof metadata / sizeof metadata[0]; i++) {
    const char *value = safetensors_reader_metadata(reader, metadata[i].key);
    CHECK_MSG(value && strcmp(value, metadata[i].value) == 0, "metadata %s", metadata[i].key);
  }
  CHECK(safetensors_reader_metadata(reader, "missing") == NULL);
  safetensors_reader_close(reader);
}

static void check_empty_file(void) {
  char path[512];
  test_tmp_path(path, sizeof path, "empty.safetensors");
  CHECK_OK(safetensors_write(path, NULL, 0, NULL, 0));
  static const unsigned char reference[16] = {8,   0,   0,   0,   0,   0,   0,   0,
                                              '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
  size_t size = 0;
  unsigned char *file = test_read_file(path, &size);
  CHECK(file && size == sizeof reference && memcmp(file, reference, size) == 0);
  free(file);
  safetensors_reader *reader = NULL;
  CHECK_OK(safetensors_reader_open(&reader, path));
  CHECK(reader && safetensors_reader_count(reader) == 0);
  CHECK(reader && safetensors_reader_metadata(reader, "format") == NULL);
  safetensors_reader_close(reader);
}

int main(void) {
  uint64_t live = test_live_blocks();
  char path[512];
  test_tmp_path(path, sizeof path, "roundtrip.safetensors");
  CHECK_OK(safetensors_write(path, tensors, TENSOR_COUNT, metadata, 3));
  check_raw_layout(path);
  check_reads_back(path);
  check_empty_file();
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("safetensors_roundtrip_test");
}
