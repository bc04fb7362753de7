/* safetensors_bad_input_test - proves the reader refuses malformed files cleanly.
 *
 * Every refusal must be a status (ST_ERR_FORMAT for bad contents, ST_ERR_IO for an unreadable
 * file) with a message that names the file, never a crash, and must free everything (the live
 * block count is checked after each case; ASan and LSan watch the rest). Inputs: (1) a small
 * valid file cut at every length; (2) thousands of seeded random corruptions of its length
 * field and header (bit flips and JSON punctuation dropped in), where a file that still opens
 * must also read every tensor; (3) hand-written headers, each with one fault, each checked for
 * the specific message: bad, overlapping, gapped and reversed offsets, sizes that overflow,
 * missing fields and fields of the wrong type, unknown dtypes, duplicates, non-JSON, deep
 * nesting, and impossible header lengths.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/safetensors.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

static char path[512];

/* Opens `path`; a failure must come with no reader, a message naming the file, and no leak. */
static st_status open_path(safetensors_reader **out) {
  uint64_t live = test_live_blocks();
  st_status status = safetensors_reader_open(out, path);
  if (status != ST_OK) {
    CHECK(*out == NULL);
    CHECK_MSG(strstr(st_last_error(), path) != NULL, "message names the file: %s", st_last_error());
    CHECK_EQ_INT(test_live_blocks(), live);
  }
  return status;
}

/* A file whose header is `json` (length field set to match) followed by `data_bytes` zeros. */
static void write_header_file(const char *json, size_t data_bytes) {
  size_t json_len = strlen(json), size = 8 + json_len + data_bytes;
  unsigned char *file = calloc(1, size);
  for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)json_len >> (8 * i));
  memcpy(file + 8, json, json_len);
  test_write_file(path, file, size);
  free(file);
}

static void check_refused(const char *json, size_t data_bytes, st_status expected,
                          const char *message) {
  write_header_file(json, data_bytes);
  safetensors_reader *reader = NULL;
  CHECK_STATUS(open_path(&reader), expected);
  CHECK_MSG(strstr(st_last_error(), message) != NULL, "for %s\n  got '%s'\n  want '%s'", json,
            st_last_error(), message);
  safetensors_reader_close(reader);
}

static void check_bad_headers(void) {
  static const struct {
    const char *json;
    size_t data_bytes;
    st_status status;
    const char *message;
  } cases[] = {
      {"{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]}}", 64,
       ST_ERR_FORMAT, "tensor 'wte.weight' data_offsets [0, 100] exceed the data size 64"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       12, ST_ERR_FORMAT, "tensor 'b' data_offsets [4, 12] overlap tensor 'a', which ends at 8"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
       12, ST_ERR_FORMAT, "data bytes [4, 8) before tensor 'b' belong to no tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, ST_ERR_FORMAT,
       "data bytes [4, 8) at the end belong to no tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
       "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
       4, ST_ERR_FORMAT, "tensor 'z' data_offsets [2, 2] overlap tensor 'a'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, ST_ERR_FORMAT,
       "tensor 'a' data_offsets [8, 4] end before they begin"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, ST_ERR_FORMAT,
       "tensor 'a' data_offsets [0, 8] span 8 bytes but its shape and dtype F32 need 12"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,9007199254740992],"
       "\"data_offsets\":[0,0]}}",
       0, ST_ERR_FORMAT, "tensor 'a' shape and dtype F32 give a size that overflows 64 bits"},
      {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,536870912],\"data_offsets\":[0,0]}}", 0,
       ST_ERR_FORMAT, "overflows 64 bits"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776],\"data_offsets\":[0,4398046511104]}}",
       4, ST_ERR_FORMAT, "data_offsets [0, 4398046511104] exceed the data size 4"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' shape[0] is not an integer in [0, 2^53]"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' shape[0] is not an integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' shape[1] is not an integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' shape[0] is not an integer"},
      {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' has no \"dtype\" string"},
      {"{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' has no \"dtype\" string"},
      {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' has unknown dtype 'F33'"},
      {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "unknown dtype 'f32'"},
      {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' has no \"shape\" array"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' has no \"shape\" array"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, ST_ERR_FORMAT,
       "tensor 'a' has no \"data_offsets\" array of two integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, ST_ERR_FORMAT,
       "no \"data_offsets\" array of two integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, ST_ERR_FORMAT,
       "no \"data_offsets\" array of two integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", 4, ST_ERR_FORMAT,
       "no \"data_offsets\" array of two integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}}", 4, ST_ERR_FORMAT,
       "no \"data_offsets\" array of two integers"},
      {"{\"a\":[1,2]}", 0, ST_ERR_FORMAT, "tensor 'a' is not a JSON object"},
      {"{\"a\":null}", 0, ST_ERR_FORMAT, "tensor 'a' is not a JSON object"},
      {"{\"__metadata__\":\"pt\"}", 0, ST_ERR_FORMAT, "__metadata__ is not a JSON object"},
      {"{\"__metadata__\":{\"step\":7}}", 0, ST_ERR_FORMAT,
       "__metadata__ value of 'step' is not a string"},
      {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, ST_ERR_FORMAT,
       "__metadata__ key 'k' appears twice"},
      {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, ST_ERR_FORMAT,
       "header has two __metadata__ objects"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
       2, ST_ERR_FORMAT, "tensor 'a' appears twice"},
      /* read as U8 by cJSON's first-match lookup; the reference implementation refuses it */
      {"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       ST_ERR_FORMAT, "tensor 'a' has the field \"dtype\" twice"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
       ST_ERR_UNSUPPORTED, "tensor 'a' has 9 dimensions; at most 8 are supported"},
      {"", 0, ST_ERR_FORMAT, "header is not a JSON object (it must begin with '{')"},
      {"not json at all", 0, ST_ERR_FORMAT, "header is not a JSON object (it must begin"},
      {"{\"a\":", 0, ST_ERR_FORMAT, "header is not valid JSON"},
      {"{} {}", 0, ST_ERR_FORMAT, "more than whitespace after its JSON object (byte 3 of 5)"},
      {"[1,2,3]", 0, ST_ERR_FORMAT, "header is not a JSON object"},
      {"\"text\"", 0, ST_ERR_FORMAT, "header is not a JSON object"},
      /* As the reference: one object from the first byte, whitespace only after it, UTF-8
       * without control bytes, and no name that cJSON would cut at a NUL (it read a, NUL, b as
       * "a"). */
      {"  {}", 0, ST_ERR_FORMAT, "header is not a JSON object (it must begin with '{')"},
      {"{}\t x", 0, ST_ERR_FORMAT, "more than whitespace after its JSON object (byte 4 of 5)"},
      {"{}\x01\x1f", 0, ST_ERR_FORMAT, "UTF-8 text without control bytes (at byte 2 of 4)"},
      {"{\"a\x01"
       "b\":{}}",
       0, ST_ERR_FORMAT, "without control bytes (at byte 3 of 10)"},
      {"{\"\xff\xfe\":{}}", 0, ST_ERR_FORMAT, "UTF-8 text without control bytes (at byte 2 of 9)"},
      {"{\"\xc0\xaf\":{}}", 0, ST_ERR_FORMAT, "UTF-8 text without control bytes (at byte 2 of 9)"},
      {"{\"\xed\xa0\x80\":{}}", 0, ST_ERR_FORMAT,
       "UTF-8 text without control bytes (at byte 2 of 10)"},
      {"{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, ST_ERR_FORMAT,
       "header holds a string with a NUL"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check_refused(cases[i].json, cases[i].data_bytes, cases[i].status, cases[i].message);
  }

  /* Nesting deeper than cJSON's limit must be refused, not recursed into until the stack ends. */
  enum { DEPTH = 100000 };
  char *deep = malloc(2 * DEPTH + 64);
  int n = sprintf(deep, "{\"a\":{\"dtype\":\"U8\",\"shape\":");
  memset(deep + n, '[', DEPTH);
  memset(deep + n + DEPTH, ']', DEPTH);
  strcpy(deep + n + 2 * DEPTH, "}}");
  check_refused(deep, 0, ST_ERR_FORMAT, "header is not valid JSON");
  free(deep);
}

/* JSON's whitespace after the object (a header written with a line break) reads as the
 * reference reads it. */
static void check_trailing_whitespace(void) {
  write_header_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}\r\n\t ", 1);
  safetensors_reader *reader = NULL;
  CHECK_OK(open_path(&reader));
  safetensors_reader_close(reader);
}

/* Cases that need control over the raw bytes, not just the JSON text. */
static void check_bad_lengths(void) {
  safetensors_reader *reader = NULL;
  test_write_file(path, "\x10\0\0", 3);
  CHECK_STATUS(open_path(&reader), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "file has 3 bytes, fewer than the 8-byte header length"));

  static const unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
  test_write_file(path, huge, sizeof huge);
  CHECK_STATUS(open_path(&reader), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "header length 9223372036854775808 exceeds the limit"));

  static const unsigned char beyond[10] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  test_write_file(path, beyond, sizeof beyond);
  CHECK_STATUS(open_path(&reader), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "header length 100 exceeds the 2 bytes after it"));

  static const unsigned char nul[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, 'x', 'y', 'z'};
  test_write_file(path, nul, sizeof nul);
  CHECK_STATUS(open_path(&reader), ST_ERR_FORMAT);
  CHECK(strstr(st_last_error(), "header is not UTF-8 text without control bytes (at byte 2 of 8)"));

  char missing[600];
  snprintf(missing, sizeof missing, "%s.missing", path);
  CHECK_STATUS(safetensors_reader_open(&reader, missing), ST_ERR_IO);
  CHECK(strstr(st_last_error(), "cannot open: No such file or directory"));
  char directory[512];
  test_tmp_path(directory, sizeof directory, "");
  CHECK_STATUS(safetensors_reader_open(&reader, directory), ST_ERR_IO);
  CHECK(strstr(st_last_error(), "is not a readable regular file"));
}

/* A corrupted file either opens, and then every tensor reads, or is refused as malformed. */
static void check_opens_consistently(const unsigned char *file, size_t size, long *opened) {
  test_write_file(path, file, size);
  safetensors_reader *reader = NULL;
  st_status status = open_path(&reader);
  if (status != ST_OK) {
    CHECK_MSG(status == ST_ERR_FORMAT, "%s: %s", st_status_string(status), st_last_error());
    return;
  }
  ++*opened;
  for (size_t i = 0; i < safetensors_reader_count(reader); i++) {
    const safetensors_entry *entry = safetensors_reader_entry(reader, i);
    void *buffer = malloc(entry->data_end - entry->data_begin + 1);
    CHECK_OK(safetensors_reader_read(reader, entry, 0, entry->numel, buffer));
    free(buffer);
  }
  safetensors_reader_close(reader);
}

static void check_corruptions(void) {
  static const float w[6] = {1, 2, 3, 4, 5, 6};
  static const uint16_t b[3] = {1, 2, 3};
  static const int64_t s[1] = {42};
  const safetensors_tensor tensors[] = {{"w", SAFETENSORS_F32, 2, {2, 3}, w},
                                        {"b", SAFETENSORS_BF16, 1, {3}, b},
                                        {"s", SAFETENSORS_I64, 0, {0}, s}};
  const safetensors_metadata metadata[] = {{"format", "pt"}};
  CHECK_OK(safetensors_write(path, tensors, 3, metadata, 1));
  size_t size = 0;
  unsigned char *valid = test_read_file(path, &size);
  if (!CHECK(valid != NULL && size > 8)) return;
  size_t header_end = 8 + (size_t)valid[0] + ((size_t)valid[1] << 8);

  long opened = 0;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t cut = 0; cut < size; cut++) {
    test_write_file(path, valid, cut);
    safetensors_reader *reader = NULL;
    CHECK_STATUS(open_path(&reader), ST_ERR_FORMAT);
  }

  unsigned char *copy = malloc(size);
  static const char punctuation[] = "{}[]\":,-.e0123456789 \\";
  for (int trial = 0; trial < 4000; trial++) {
    memcpy(copy, valid, size);
    int changes = 1 + (int)(test_random(&seed) % 3);
    for (int c = 0; c < changes; c++) {
      size_t at = test_random(&seed) % header_end;
      if (trial % 2) {
        copy[at] ^= (unsigned char)(1u << (test_random(&seed) % 8));
      } else {
        copy[at] = (unsigned char)punctuation[test_random(&seed) % (sizeof punctuation - 1)];
      }
    }
    check_opens_consistently(copy, size, &opened);
  }
  printf("corrupted files that still opened (and read): %ld of 4000\n", opened);
  CHECK(opened < 4000); /* the corruptions did reach the parser */
  free(copy);
  free(valid);
}

int main(void) {
  uint64_t live = test_live_blocks();
  test_tmp_path(path, sizeof path, "bad.safetensors");
  check_bad_headers();
  check_bad_lengths();
  check_trailing_whitespace();
  check_corruptions();
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("safetensors_bad_input_test");
}
