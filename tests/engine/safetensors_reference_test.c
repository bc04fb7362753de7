/* safetensors_reference_test - proves compatibility with Hugging Face's own implementation.
 *
 * testdata/reference.safetensors was written by the reference implementation (see
 * testdata/make_reference.py). The values it holds are spelled out again below, and this test
 * proves that (1) the reader finds every tensor with its dtype, shape and exact bytes, and the
 * metadata value with all its escapes decoded; (2) the writer, given the same tensors and
 * metadata, produces a file identical to the reference's byte for byte (layout order, JSON
 * spelling, escaping and padding included).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/io/safetensors.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

static const char *const reference_path = "tests/engine/testdata/reference.safetensors";
static const char *const note_value =
    "quote \" backslash \\ tab \t newline \n ctrl \x01 utf8 \xc3\xa9";

static const float wte[12] = {-1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5};
static const uint16_t ln_bias_bf16[3] = {0x3f80, 0xc000, 0x3f00};
static const uint16_t attn_bias_f16[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
static const int64_t step[1] = {1234567890123};
static const int32_t tokens[5] = {-1, 0, 1, 255, 2147483647};
static const uint8_t mask[3] = {1, 0, 255};
static const double loss[2] = {0.25, -3.5};

/* Listed in an order unlike the file's, so the writer's sorting is exercised. */
static const safetensors_tensor reference_tensors[] = {
    {"wte.weight", SAFETENSORS_F32, 2, {4, 3}, wte},
    {"h.0.ln_1.bias", SAFETENSORS_BF16, 1, {3}, ln_bias_bf16},
    {"h.0.attn.bias", SAFETENSORS_F16, 2, {2, 2}, attn_bias_f16},
    {"step", SAFETENSORS_I64, 0, {0}, step},
    {"tokens", SAFETENSORS_I32, 1, {5}, tokens},
    {"mask", SAFETENSORS_U8, 1, {3}, mask},
    {"loss", SAFETENSORS_F64, 1, {2}, loss},
    {"empty", SAFETENSORS_F32, 2, {0, 3}, NULL},
};
#define REFERENCE_COUNT (sizeof reference_tensors / sizeof reference_tensors[0])

static void check_reader_sees_reference(void) {
  safetensors_reader *reader = NULL;
  CHECK_OK(safetensors_reader_open(&reader, reference_path));
  if (!reader) return;
  CHECK_EQ_INT(safetensors_reader_count(reader), REFERENCE_COUNT);
  for (size_t i = 0; i < REFERENCE_COUNT; i++) {
    const safetensors_tensor *want = &reference_tensors[i];
    const safetensors_entry *got = safetensors_reader_find(reader, want->name);
    if (!CHECK_MSG(got != NULL, "tensor %s missing", want->name)) continue;
    CHECK_MSG(got->dtype == want->dtype && got->ndim == want->ndim, "%s dtype/ndim", want->name);
    uint64_t numel = 1;
    for (int d = 0; d < want->ndim; d++) {
      CHECK_EQ_INT(got->shape[d], want->shape[d]);
      numel *= (uint64_t)want->shape[d];
    }
    CHECK_EQ_INT(got->numel, numel);
    size_t bytes = numel * safetensors_dtype_size(want->dtype);
    unsigned char buffer[64];
    CHECK_OK(safetensors_reader_read(reader, got, 0, numel, buffer));
    CHECK_MSG(bytes == 0 || memcmp(buffer, want->data, bytes) == 0, "%s data", want->name);
  }
  const char *note = safetensors_reader_metadata(reader, "note");
  CHECK_MSG(note && strcmp(note, note_value) == 0, "note metadata decoded: %s", note);
  safetensors_reader_close(reader);
}

static void check_writer_matches_reference(void) {
  char path[512];
  test_tmp_path(path, sizeof path, "ours.safetensors");
  const safetensors_metadata metadata[] = {{"note", note_value}};
  CHECK_OK(safetensors_write(path, reference_tensors, REFERENCE_COUNT, metadata, 1));
  size_t ours_size = 0, reference_size = 0;
  unsigned char *ours = test_read_file(path, &ours_size);
  unsigned char *reference = test_read_file(reference_path, &reference_size);
  CHECK(ours != NULL && reference != NULL);
  CHECK_EQ_INT(ours_size, reference_size);
  if (ours && reference && ours_size == reference_size) {
    size_t first_difference = 0;
    while (first_difference < ours_size && ours[first_difference] == reference[first_difference]) {
      first_difference++;
    }
    CHECK_MSG(first_difference == ours_size, "files differ from byte %zu", first_difference);
  }
  free(ours);
  free(reference);
}

int main(void) {
  uint64_t live = test_live_blocks();
  check_reader_sees_reference();
  check_writer_matches_reference();
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("safetensors_reference_test");
}
