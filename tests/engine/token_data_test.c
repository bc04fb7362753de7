/* token_data_test - proves the token shard loader yields the right windows and refuses bad data.
 *
 * Shards are written here with tokens given by a formula, token_at(shard, index), so every
 * expected window is computed from the formula and llm.c's rule (a shard of n tokens holds
 * (n - 1) / G global batches of G = dp_size * B * T tokens), not by the loader. Proven: batches
 * come in name order of the files and hold the expected inputs and next-token targets; the
 * loader wraps from the last shard back to the first; the dp ranks' slices tile each global
 * batch exactly once; a saved position restores the same stream, in the same loader, a new one,
 * and on a different mesh with the same global batch; and wrong magic, wrong version,
 * truncated and overlong files, a header cut short, a shard too small for one batch, a pattern
 * that matches nothing, an out-of-vocabulary token (named by file and index), bad
 * configurations and positions, and failed allocations are refused with a message and no leak.
 */
#include "engine/token_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

enum { VOCAB = 1000, MAX_TOKENS = 4096 };

static uint16_t token_at(int shard, uint64_t index) {
  return (uint16_t)((shard * 7919 + index * 31 + index / 3) % VOCAB);
}

/* Writes a shard with explicit header fields, so tests can also write wrong ones. */
static void write_shard_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                            const uint16_t *tokens, size_t token_count) {
  size_t size = TOKEN_SHARD_HEADER_INTS * sizeof(int32_t) + token_count * sizeof(uint16_t);
  unsigned char *file = calloc(1, size);
  int32_t header[3] = {magic, version, count};
  memcpy(file, header, sizeof header);
  memcpy(file + TOKEN_SHARD_HEADER_INTS * sizeof(int32_t), tokens, token_count * sizeof(uint16_t));
  test_write_file(path, file, size);
  free(file);
}

/* Shard `shard` of `n` formula tokens, named `name` inside directory `dir`. */
static void write_shard(const char *dir, const char *name, int shard, size_t n) {
  uint16_t tokens[MAX_TOKENS];
  for (size_t i = 0; i < n; i++) tokens[i] = token_at(shard, i);
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  write_shard_raw(path, TOKEN_SHARD_MAGIC, TOKEN_SHARD_VERSION, (int32_t)n, tokens, n);
}

static void make_dir(char *out, size_t size, const char *name) {
  test_tmp_path(out, size, name);
  mkdir(out, 0777);
}

/* Three shards written out of name order; shard k (in name order) has lengths[k] tokens. */
static const size_t lengths[3] = {100, 129, 80}; /* 129 = 8 x 16 + 1 fits exactly */
static char data_dir[512], pattern[600];

static void make_dataset(void) {
  make_dir(data_dir, sizeof data_dir, "tokens");
  write_shard(data_dir, "train_002.bin", 2, lengths[2]);
  write_shard(data_dir, "train_000.bin", 0, lengths[0]);
  write_shard(data_dir, "train_001.bin", 1, lengths[1]);
  snprintf(pattern, sizeof pattern, "%s/train_*.bin", data_dir);
}

/* The start of every global batch over one pass of the data, by llm.c's rule. */
typedef struct batch_start {
  int shard;
  uint64_t offset;
} batch_start;

static int batch_starts(uint64_t global, batch_start *out) {
  int n = 0;
  for (int s = 0; s < 3; s++) {
    for (uint64_t k = 0; k < (lengths[s] - 1) / global; k++)
      out[n++] = (batch_start){s, k * global};
  }
  return n;
}

static token_loader *open_loader(int batch, int seq, int rank, int size) {
  token_loader_config config = {pattern, batch, seq, rank, size, VOCAB};
  token_loader *loader = NULL;
  CHECK_OK(token_loader_open(&loader, &config));
  return loader;
}

/* Whether the loader's next batch is rank `rank`'s slice of the global batch at `start`. */
static int next_matches(token_loader *loader, batch_start start, int batch, int seq, int rank) {
  int32_t inputs[MAX_TOKENS], targets[MAX_TOKENS];
  st_status status = token_loader_next(loader, inputs, targets);
  CHECK_OK(status);
  if (status != ST_OK) return 0;
  uint64_t first = start.offset + (uint64_t)rank * batch * seq;
  int ok = 1;
  for (int i = 0; i < batch * seq; i++) {
    ok &= inputs[i] == token_at(start.shard, first + i);
    ok &= targets[i] == token_at(start.shard, first + i + 1);
  }
  return ok;
}

static void check_sequence_and_wrap_around(void) {
  enum { B = 2, T = 8 };
  batch_start starts[64];
  int per_pass = batch_starts(B * T, starts);
  CHECK_EQ_INT(per_pass, 6 + 8 + 4);
  token_loader *loader = open_loader(B, T, 0, 1);
  if (!loader) return;
  /* Two and a half passes: the stream must wrap from the last shard to the first twice. */
  for (int i = 0; i < per_pass * 5 / 2; i++) {
    batch_start want = starts[i % per_pass];
    CHECK_MSG(next_matches(loader, want, B, T, 0), "batch %d (shard %d offset %llu)", i, want.shard,
              (unsigned long long)want.offset);
  }
  token_loader_close(loader);
}

/* Ranks read disjoint slices whose union, in rank order, is exactly the global batch. */
static void check_data_parallel_slices(void) {
  enum { DP = 3, B = 2, T = 4, G = DP * B * T };
  batch_start starts[64];
  int per_pass = batch_starts(G, starts);
  token_loader *ranks[DP];
  for (int r = 0; r < DP; r++) ranks[r] = open_loader(B, T, r, DP);
  for (int i = 0; i < per_pass + 2; i++) {
    batch_start want = starts[i % per_pass];
    int covered[G] = {0};
    int32_t inputs[B * T], targets[B * T];
    for (int r = 0; r < DP && ranks[r]; r++) {
      CHECK_OK(token_loader_next(ranks[r], inputs, targets));
      for (int j = 0; j < B * T; j++) {
        int at = r * B * T + j;
        CHECK_EQ_INT(inputs[j], token_at(want.shard, want.offset + at));
        CHECK_EQ_INT(targets[j], token_at(want.shard, want.offset + at + 1));
        covered[at]++;
      }
    }
    for (int k = 0; k < G; k++) {
      CHECK_MSG(covered[k] == 1, "batch %d token %d read %d times", i, k, covered[k]);
    }
  }
  for (int r = 0; r < DP; r++) token_loader_close(ranks[r]);
}

static void read_batches(token_loader *loader, int count, int32_t *out, int per_batch) {
  int32_t targets[MAX_TOKENS];
  for (int i = 0; i < count; i++) CHECK_OK(token_loader_next(loader, out + i * per_batch, targets));
}

static void check_save_and_restore(void) {
  enum { B = 2, T = 8, N = 9 };
  static int32_t first[N * B * T], again[N * B * T], fresh[N * B * T];
  token_loader *loader = open_loader(B, T, 0, 1);
  if (!loader) return;
  read_batches(loader, 4, again, B * T);
  token_position saved = token_loader_tell(loader);
  read_batches(loader, N, first, B * T); /* crosses into the next shard */
  CHECK_OK(token_loader_seek(loader, saved));
  read_batches(loader, N, again, B * T);
  CHECK(memcmp(first, again, sizeof first) == 0);

  token_loader *resumed = open_loader(B, T, 0, 1);
  if (resumed) CHECK_OK(token_loader_seek(resumed, saved));
  if (resumed) read_batches(resumed, N, fresh, B * T);
  CHECK(memcmp(first, fresh, sizeof first) == 0);
  token_loader_close(resumed);

  token_position outside[] = {{3, 0}, {0, lengths[0] + 1}, {UINT64_MAX, UINT64_MAX}};
  for (int i = 0; i < 3; i++) {
    CHECK_STATUS(token_loader_seek(loader, outside[i]), ST_ERR_INVALID_ARG);
    CHECK(strstr(st_last_error(), "is outside the data (3 shards)") != NULL);
  }
  token_loader_close(loader);
}

/* A position saved on 1 rank x B=4 resumes on 2 ranks x B=2: the global batches continue. */
static void check_resume_on_another_mesh(void) {
  enum { T = 4, G = 16 };
  batch_start starts[64];
  int per_pass = batch_starts(G, starts);
  token_loader *single = open_loader(4, T, 0, 1);
  if (!single) return;
  int32_t inputs[G], targets[G];
  for (int i = 0; i < 7; i++) CHECK_OK(token_loader_next(single, inputs, targets));
  token_position saved = token_loader_tell(single);
  token_loader_close(single);
  for (int r = 0; r < 2; r++) {
    token_loader *rank = open_loader(2, T, r, 2);
    if (!rank) continue;
    CHECK_OK(token_loader_seek(rank, saved));
    for (int i = 7; i < 7 + per_pass; i++) {
      CHECK_MSG(next_matches(rank, starts[i % per_pass], 2, T, r), "rank %d batch %d", r, i);
    }
    token_loader_close(rank);
  }
}

/* Opening with B = 2, T = 8 on one rank (17 tokens per global batch) must fail cleanly. */
static void check_refused(const char *file_pattern, st_status expected, const char *message) {
  uint64_t live = test_live_blocks();
  token_loader_config config = {file_pattern, 2, 8, 0, 1, VOCAB};
  token_loader *loader = NULL;
  CHECK_STATUS(token_loader_open(&loader, &config), expected);
  CHECK(loader == NULL);
  CHECK_MSG(strstr(st_last_error(), message) != NULL, "'%s' lacks '%s'", st_last_error(), message);
  CHECK_EQ_INT(test_live_blocks(), live);
}

static void check_bad_shards(void) {
  char dir[512], path[600];
  make_dir(dir, sizeof dir, "bad");
  uint16_t tokens[64] = {0};
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
      {TOKEN_SHARD_MAGIC, 1, 16, 16, "16 tokens, fewer than the 17 that one global batch reads"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/case%zu.bin", dir, i);
    write_shard_raw(path, cases[i].magic, cases[i].version, cases[i].count, tokens,
                    cases[i].written);
    check_refused(path, ST_ERR_FORMAT, cases[i].message);
    CHECK(strstr(st_last_error(), path) != NULL);
  }
  snprintf(path, sizeof path, "%s/short.bin", dir);
  test_write_file(path, "\x28\xd3\x34\x01", 4);
  check_refused(path, ST_ERR_FORMAT, "file has 4 bytes, fewer than the 1024-byte header");

  /* One bad shard among good ones fails the whole open, naming it. */
  char mixed[512], mixed_pattern[600];
  make_dir(mixed, sizeof mixed, "mixed");
  write_shard(mixed, "a.bin", 0, 100);
  snprintf(path, sizeof path, "%s/b.bin", mixed);
  write_shard_raw(path, TOKEN_SHARD_MAGIC, 1, 100, tokens, 50);
  snprintf(mixed_pattern, sizeof mixed_pattern, "%s/*.bin", mixed);
  check_refused(mixed_pattern, ST_ERR_FORMAT, "b.bin: header says 100 tokens");

  snprintf(path, sizeof path, "%s/nothing_*.bin", dir);
  check_refused(path, ST_ERR_IO, "no file matches");
}

static void check_bad_config(void) {
  static const token_loader_config bad[] = {
      {NULL, 0, 8, 0, 1, VOCAB}, {NULL, 2, -1, 0, 1, VOCAB},
      {NULL, 2, 8, 2, 2, VOCAB}, {NULL, 2, 8, -1, 2, VOCAB},
      {NULL, 2, 8, 0, 0, VOCAB}, {NULL, 2, 8, 0, 1, 0},
      {NULL, 2, 8, 0, 1, 65537}, {NULL, 2147483647, 2147483647, 0, 2147483647, VOCAB},
  };
  static const char *const messages[] = {"batch size 0 and sequence length 8 must be positive",
                                         "batch size 2 and sequence length -1",
                                         "dp rank 2 is not in [0, dp size 2)",
                                         "dp rank -1 is not in",
                                         "dp rank 0 is not in [0, dp size 0)",
                                         "vocabulary size 0 is not in [1, 65536]",
                                         "vocabulary size 65537",
                                         "a global batch of 2147483647 x 2147483647 x 2147483647 "
                                         "tokens is too large"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    token_loader_config config = bad[i];
    config.pattern = pattern;
    token_loader *loader = NULL;
    CHECK_STATUS(token_loader_open(&loader, &config), ST_ERR_INVALID_ARG);
    CHECK(loader == NULL);
    CHECK_MSG(strstr(st_last_error(), messages[i]) != NULL, "%s", st_last_error());
  }
}

static void check_token_outside_vocabulary(void) {
  char dir[512], path[600], vocab_pattern[600];
  make_dir(dir, sizeof dir, "vocab");
  uint16_t tokens[100];
  for (int i = 0; i < 100; i++) tokens[i] = (uint16_t)(i % 50);
  tokens[37] = 1000; /* in the third batch of 17 tokens read at offsets 0, 16, 32 */
  snprintf(path, sizeof path, "%s/v.bin", dir);
  write_shard_raw(path, TOKEN_SHARD_MAGIC, 1, 100, tokens, 100);
  snprintf(vocab_pattern, sizeof vocab_pattern, "%s/*.bin", dir);
  token_loader_config config = {vocab_pattern, 2, 8, 0, 1, VOCAB};
  token_loader *loader = NULL;
  CHECK_OK(token_loader_open(&loader, &config));
  if (!loader) return;
  int32_t inputs[16], targets[16];
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

static void check_out_of_memory(void) {
  uint64_t live = test_live_blocks();
  token_loader_config config = {pattern, 2, 8, 0, 1, VOCAB};
  int failures = 0;
  for (int n = 1; n < 20; n++) {
    token_loader *loader = NULL;
    mem_fail_nth(n);
    st_status status = token_loader_open(&loader, &config);
    mem_fail_nth(0);
    token_loader_close(loader);
    CHECK_EQ_INT(test_live_blocks(), live);
    if (status == ST_OK) break;
    CHECK_STATUS(status, ST_ERR_OOM);
    failures++;
  }
  CHECK(failures >= 4); /* loader, paths, shard table, window */
}

int main(void) {
  uint64_t live = test_live_blocks();
  make_dataset();
  check_sequence_and_wrap_around();
  check_data_parallel_slices();
  check_save_and_restore();
  check_resume_on_another_mesh();
  check_bad_shards();
  check_bad_config();
  check_token_outside_vocabulary();
  check_out_of_memory();
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("token_data_test");
}
