/* token_data_test - proves the token shard loader yields the right windows in the right order.
 *
 * Shards are written here with tokens given by a formula, token_at(shard, index), so every
 * expected window is computed from the formula and llm.c's rule (a shard of n tokens holds
 * (n - 1) / G global batches of G = micro-batches * dp_size * B * T tokens), not by the loader.
 * Proven: batches come in name order of the files and hold the expected inputs and next-token
 * targets; the loader wraps from the last shard back to the first, skips a shard too short for
 * a global batch, and counts the global batches of a pass by the same rule; the dp ranks'
 * slices tile each global batch exactly once; a saved position restores the same stream, in the same loader, a new one,
 * and on a different mesh with the same global batch; with gradient accumulation the global batch
 * (all micro-batches) decides where it starts, so accumulating and data-parallel meshes with the
 * same global batch read the same tokens; positions outside the data are refused.
 * (token_data_bad_input_test covers malformed data.)
 */
#include "engine/io/token_data.h"

#include <stdio.h>
#include <string.h>

#include "tests/engine/test_files.h"
#include "tests/testing.h"

enum { VOCAB = 1000, MAX_TOKENS = 4096 };

static uint16_t token_at(int shard, uint64_t index) {
  return (uint16_t)((shard * 7919 + index * 31 + index / 3) % VOCAB);
}

/* Shard `shard` of `n` formula tokens, named `name` inside directory `dir`. */
static void write_shard(const char *dir, const char *name, int shard, size_t n) {
  uint16_t tokens[MAX_TOKENS];
  for (size_t i = 0; i < n; i++) tokens[i] = token_at(shard, i);
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  test_write_token_shard(path, TOKEN_SHARD_MAGIC, TOKEN_SHARD_VERSION, (int32_t)n, tokens, n);
}

/* Three shards written out of name order; shard k (in name order) has lengths[k] tokens. */
static const size_t lengths[3] = {100, 129, 80}; /* 129 = 8 x 16 + 1 fits exactly */
static char data_dir[512], pattern[600];

static void make_dataset(void) {
  test_make_dir(data_dir, sizeof data_dir, "tokens");
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

static token_loader *open_accumulating(int batch, int seq, int rank, int size, int micro) {
  token_loader_config config = {pattern, batch, seq, rank, size, VOCAB, micro, 0};
  token_loader *loader = NULL;
  CHECK_OK(token_loader_open(&loader, &config));
  return loader;
}

static token_loader *open_loader(int batch, int seq, int rank, int size) {
  token_loader_config config = {pattern, batch, seq, rank, size, VOCAB, 1, 0};
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

/* One rank reads two and a half passes of B x T batches (so the stream wraps from the last
 * shard to the first twice); each must be the batch llm.c's rule puts there, and a pass must
 * hold `per_pass` of them. */
static void check_stream(int B, int T, int per_pass) {
  batch_start starts[64];
  CHECK_EQ_INT(batch_starts((uint64_t)B * T, starts), per_pass);
  token_loader *loader = open_loader(B, T, 0, 1);
  if (!loader) return;
  CHECK_EQ_INT((int)token_loader_batches_per_pass(loader), per_pass);
  for (int i = 0; i < per_pass * 5 / 2; i++) {
    batch_start want = starts[i % per_pass];
    CHECK_MSG(next_matches(loader, want, B, T, 0), "B %d T %d batch %d (shard %d offset %llu)", B,
              T, i, want.shard, (unsigned long long)want.offset);
  }
  token_loader_close(loader);
}

static void check_sequence_and_wrap_around(void) { check_stream(2, 8, 6 + 8 + 4); }

/* With a global batch of 97 tokens the third shard (80 tokens) holds none: it is skipped, and
 * the stream goes from the second shard back to the first. */
static void check_short_shard_skipped(void) { check_stream(4, 24, 1 + 1 + 0); }

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

/* A global batch of GA micro-batches on DP ranks: micro-batch k of rank r is the slice
 * k * DP + r of the global batch, whose start follows llm.c's rule for the whole global batch
 * (G = GA x DP x B x T), never one micro-batch's. With T = 8 the third shard (80 tokens) holds 9
 * micro-batches of one sequence: deciding per micro-batch, 1 rank accumulating 2 would read a
 * fifth global batch there (its second half from the next shard) that 2 ranks skip. */
static void check_accumulation(int DP, int GA) {
  enum { B = 1, T = 8 };
  batch_start starts[64];
  const int per_pass = batch_starts((uint64_t)GA * DP * B * T, starts);
  for (int r = 0; r < DP; r++) {
    token_loader *loader = open_accumulating(B, T, r, DP, GA);
    if (!loader) return;
    CHECK_EQ_INT((int)token_loader_batches_per_pass(loader), per_pass);
    for (int i = 0; i < per_pass * 3 / 2; i++) {
      for (int k = 0; k < GA; k++) {
        batch_start want = starts[i % per_pass];
        want.offset += (uint64_t)k * DP * B * T;
        CHECK_MSG(next_matches(loader, want, B, T, r),
                  "dp %d x %d micro-batches: rank %d batch %d "
                  "micro-batch %d",
                  DP, GA, r, i, k);
      }
    }
    token_loader_close(loader);
  }
}

int main(void) {
  uint64_t live = test_live_blocks();
  make_dataset();
  check_sequence_and_wrap_around();
  check_short_shard_skipped();
  check_data_parallel_slices();
  check_save_and_restore();
  check_resume_on_another_mesh();
  check_accumulation(1, 2);
  check_accumulation(2, 2);
  check_accumulation(2, 1);
  CHECK_EQ_INT(test_live_blocks(), live);
  return test_finish("token_data_test");
}
