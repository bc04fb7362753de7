/* token_data_bad_input_test - proves the token loader refuses malformed data cleanly.
 *
 * Every refusal must be a status with a message naming the file, never a crash, and must free
 * everything (live blocks checked; ASan and LSan watch the rest). Inputs: (1) shards with one
 * fault each: wrong magic, wrong version, a count larger or smaller than the file holds, a
 * negative count, a file shorter than the header, a shard too small for one global batch, one
 * bad shard among good ones, a pattern that matches nothing; (2) bad configurations; (3) a token
 * outside the vocabulary, refused when its batch is read, named by file and index, with the
 * position left where it was; (4) a small valid shard cut at every length; (5) thousands of
 * seeded bit flips anywhere in it: the loader either refuses at open, or opens and then every
 * batch either reads or is refused for an out-of-vocabulary token; (6) each allocation of open
 * failing in turn.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/token_data.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

enum { VOCAB = 1000, B = 2, T = 8, GLOBAL = B * T };

static char dir[512];

/* Opening with B = 2, T = 8 on one rank (17 tokens per global batch) must fail cleanly. */
static void check_refused(const char *pattern, st_status expected, const char *message) {
  uint64_t live = test_live_blocks();
  token_loader_config config = {pattern, B, T, 0, 1, VOCAB, 1, 0};
  token_loader *loader = NULL;
  CHECK_STATUS(token_loader_open(&loader, &config), expected);
  CHECK(loader == NULL);
  CHECK_MSG(strstr(st_last_error(), message) != NULL, "'%s' lacks '%s'", st_last_error(), message);
  CHECK_EQ_INT(test_live_blocks(), live);
}

static void check_bad_shards(void) {
  char path[600];
  uint16_t tokens[100] = {0};
  static const struct {
    int32_t magic, version, count;
    size_t written;
    const char *message;
  } cases[] = {
      {20240521, 1, 64, 64, "magic number 20240521 is not 20240520"},
      {TOKEN_SHARD_MAGIC, 2, 64, 64, "version 2 is not 1"},
      {TOKEN_SHARD_MAGIC, 1, 64, 40, "header says 64 tokens (128 bytes) but the file holds 80"},
      {TOKEN_SHARD_MAGIC, 1, 40, 64, "header says 40 tokens (80 bytes) but the file holds 128"},
      {TOKEN_SHARD_MAGIC, 1, -5, 64, "token count -5 is negative"},
      {TOKEN_SHARD_MAGIC, 1, 16, 16,
       "the data holds 1 sequences of T + 1 = 9 tokens, fewer than the 2 of one batch (1 "
       "micro-batch x dp size 1 x B 2)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/case%zu.bin", dir, i);
    test_write_token_shard(path, cases[i].magic, cases[i].version, cases[i].count, tokens,
                           cases[i].written);
    check_refused(path, ST_ERR_FORMAT, cases[i].message);
    CHECK(strstr(st_last_error(), path) != NULL);
  }
  snprintf(path, sizeof path, "%s/short.bin", dir);
  test_write_file(path, "\x28\xd3\x34\x01", 4);
  check_refused(path, ST_ERR_FORMAT,
                "short.bin: file has 4 bytes, fewer than the 1024-byte header");

  /* One bad shard among good ones fails the whole open, naming it. */
  char mixed[512], pattern[600];
  test_make_dir(mixed, sizeof mixed, "mixed");
  snprintf(path, sizeof path, "%s/a.bin", mixed);
  test_write_token_shard(path, TOKEN_SHARD_MAGIC, 1, 100, tokens, 100);
  snprintf(path, sizeof path, "%s/b.bin", mixed);
  test_write_token_shard(path, TOKEN_SHARD_MAGIC, 1, 100, tokens, 50);
  snprintf(pattern, sizeof pattern, "%s/*.bin", mixed);
  check_refused(pattern, ST_ERR_FORMAT, "b.bin: header says 100 tokens");

  snprintf(pattern, sizeof pattern, "%s/nothing_*.bin", dir);
  check_refused(pattern, ST_ERR_IO, "no file matches");
}

static void check_bad_config(void) {
  static const token_loader_config bad[] = {
      {"x", 0, 8, 0, 1, VOCAB, 1, 0}, {"x", 2, -1, 0, 1, VOCAB, 1, 0},
      {"x", 2, 8, 2, 2, VOCAB, 1, 0}, {"x", 2, 8, -1, 2, VOCAB, 1, 0},
      {"x", 2, 8, 0, 0, VOCAB, 1, 0}, {"x", 2, 8, 0, 1, 0, 1, 0},
      {"x", 2, 8, 0, 1, 65537, 1, 0}, {"x", 2147483647, 2147483647, 0, 2147483647, VOCAB, 1, 0},
      {"x", 2, 8, 0, 1, VOCAB, 0, 0}, {"x", 65536, 65536, 0, 65536, VOCAB, 65536, 0},
  };
  static const char *const messages[] = {"batch size 0 and sequence length 8 must be positive",
                                         "batch size 2 and sequence length -1",
                                         "dp rank 2 is not in [0, dp size 2)",
                                         "dp rank -1 is not in",
                                         "dp rank 0 is not in [0, dp size 0)",
                                         "vocabulary size 0 is not in [1, 65536]",
                                         "vocabulary size 65537",
                                         "a global batch of 1 x 2147483647 x 2147483647 x "
                                         "2147483647 tokens is too large",
                                         "0 micro-batches per global batch",
                                         "a global batch of 65536 x 65536 x 65536 x 65536 tokens "
                                         "is too large"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    token_loader *loader = NULL;
    CHECK_STATUS(token_loader_open(&loader, &bad[i]), ST_ERR_INVALID_ARG);
    CHECK(loader == NULL);
    CHECK_MSG(strstr(st_last_error(), messages[i]) != NULL, "%s", st_last_error());
  }
}

static void check_token_outside_vocabulary(void) {
  char path[600];
  uint16_t tokens[100];
  for (int i = 0; i < 100; i++) tokens[i] = (uint16_t)(i % 50);
  tokens[37] = VOCAB; /* in the third batch: 17 tokens read at offsets 0, 16, 32 */
  snprintf(path, sizeof path, "%s/vocab.bin", dir);
  test_write_token_shard(path, TOKEN_SHARD_MAGIC, 1, 100, tokens, 100);
  token_loader_config config = {path, B, T, 0, 1, VOCAB, 1, 0};
  token_loader *loader = NULL;
  CHECK_OK(token_loader_open(&loader, &config));
  if (!loader) return;
  int32_t inputs[GLOBAL], targets[GLOBAL];
  CHECK_OK(token_loader_next(loader, inputs, targets));
  CHECK_OK(token_loader_next(loader, inputs, targets));
  token_position before = token_loader_tell(loader);
  CHECK_STATUS(token_loader_next(loader, inputs, targets), ST_ERR_FORMAT);
  char want[700];
  snprintf(want, sizeof want, "%s: token 1000 at index 37 is not below the vocabulary size 1000",
           path);
  CHECK_MSG(strcmp(st_last_error(), want) == 0, "%s", st_last_error());
  token_position after = token_loader_tell(loader);
  CHECK(after.shard == before.shard && after.offset == before.offset);
  token_loader_close(loader);
}

/* A shard of 40 tokens, all below VOCAB; written to `path`, returned in `file`. */
static size_t write_valid_shard(const char *path, unsigned char *file, size_t capacity) {
  uint16_t tokens[40];
  for (int i = 0; i < 40; i++) tokens[i] = (uint16_t)(i * 23 % VOCAB);
  test_write_token_shard(path, TOKEN_SHARD_MAGIC, 1, 40, tokens, 40);
  size_t size = 0;
  unsigned char *written = test_read_file(path, &size);
  CHECK(written != NULL && size <= capacity);
  if (written && size <= capacity) memcpy(file, written, size);
  free(written);
  return size;
}

/* Opens `path` and reads two passes of batches; every failure must be a refusal of the data. */
static int open_and_read_all(const char *path) {
  uint64_t live = test_live_blocks();
  token_loader_config config = {path, B, T, 0, 1, VOCAB, 1, 0};
  token_loader *loader = NULL;
  st_status status = token_loader_open(&loader, &config);
  if (status != ST_OK) {
    CHECK_MSG(status == ST_ERR_FORMAT && loader == NULL, "%s", st_last_error());
    CHECK_MSG(strstr(st_last_error(), path) != NULL, "names the file: %s", st_last_error());
    CHECK_EQ_INT(test_live_blocks(), live);
    return 0;
  }
  for (int i = 0; i < 2 * ((40 - 1) / GLOBAL); i++) {
    int32_t inputs[GLOBAL], targets[GLOBAL];
    status = token_loader_next(loader, inputs, targets);
    CHECK_MSG(status == ST_OK || (status == ST_ERR_FORMAT &&
                                  strstr(st_last_error(), "is not below the vocabulary size")),
              "%s", st_last_error());
    if (status == ST_OK) {
      for (int j = 0; j < GLOBAL; j++) CHECK(inputs[j] < VOCAB && targets[j] < VOCAB);
    }
  }
  token_loader_close(loader);
  CHECK_EQ_INT(test_live_blocks(), live);
  return 1;
}

static void check_truncations_and_corruptions(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/fuzz.bin", dir);
  unsigned char valid[2048], copy[2048];
  size_t size = write_valid_shard(path, valid, sizeof valid);
  CHECK(open_and_read_all(path));
  for (size_t cut = 0; cut < size; cut++) {
    test_write_file(path, valid, cut);
    CHECK_MSG(!open_and_read_all(path), "a shard cut to %zu bytes opened", cut);
  }
  int opened = 0;
  uint64_t seed = 0x2545f4914f6cdd1dull;
  for (int trial = 0; trial < 3000; trial++) {
    memcpy(copy, valid, size);
    /* Half the flips land in the three header fields the loader reads, half anywhere. */
    size_t span = trial % 2 ? 3 * sizeof(int32_t) : size;
    for (int flips = 1 + (int)(test_random(&seed) % 3); flips > 0; flips--) {
      copy[test_random(&seed) % span] ^= (unsigned char)(1u << (test_random(&seed) % 8));
    }
    test_write_file(path, copy, size);
    opened += open_and_read_all(path);
  }
  printf("corrupted shards that still opened: %d of 3000\n", opened);
  CHECK(opened > 0 && opened < 3000); /* both outcomes were exercised */
}

static st_status open_and_close(const void *config) {
  token_loader *loader = NULL;
  st_status status = token_loader_open(&loader, config);
  CHECK(status == ST_OK || loader == NULL);
  token_loader_close(loader);
  return status;
}

static void check_out_of_memory(void) {
  char path[600];
  unsigned char file[2048];
  snprintf(path, sizeof path, "%s/oom.bin", dir);
  write_valid_shard(path, file, sizeof file);
  token_loader_config config = {path, B, T, 0, 1, VOCAB, 1, 0};
  /* The loader, its paths, its shard table and its window. */
  CHECK_EQ_INT(test_fail_each_allocation("open", open_and_close, &config), 4);
}

int main(void) {
  uint64_t live = test_live_blocks();
  test_make_dir(dir, sizeof dir, "bad_tokens");
  check_bad_shards();
  check_bad_config();
  check_token_outside_vocabulary();
  check_truncations_and_corruptions();
  check_out_of_memory();
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("token_data_bad_input_test");
}
