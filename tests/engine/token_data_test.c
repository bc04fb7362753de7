/* token_data_test - proves the token shard loader yields the right windows in the right order.
 *
 * Shards are written here with tokens given by a formula, token_at(shard, index), so every
 * expected window is computed from the formula and the rule of docs/FORMATS.md, not by the
 * loader: the data is one stream of sequences, the windows of T + 1 tokens at offsets 0, T, 2T,
 * ... of each shard in name order while they fit, starting over after the last shard; a global
 * batch is the next micro-batches x dp x B of them, and micro-batch k of dp rank d holds its
 * sequences (k x dp + d) x B on. Proven: sequences come in name order of the files with the
 * expected inputs and next-token targets, also where a micro-batch spans two shards; the stream
 * wraps from the last shard back to the first and skips a shard too short for one sequence; a
 * pass is counted in global batches by the same rule; the dp ranks' slices tile each global
 * batch exactly once; accumulating and data-parallel meshes with the same global batch read the
 * same sequences; a saved position restores the same stream, in the same loader, a new one, and
 * on a different mesh with the same global batch; positions outside the data are refused.
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

/* Where a sequence of the stream starts. */
typedef struct seq_start {
  int shard;
  uint64_t offset;
} seq_start;

/* The sequences of one pass over the data, in order; returns their count. */
static int pass_sequences(int T, seq_start *out) {
  int n = 0;
  for (int s = 0; s < 3; s++) {
    for (uint64_t at = 0; at + T + 1 <= lengths[s]; at += T) out[n++] = (seq_start){s, at};
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
  return open_accumulating(batch, seq, rank, size, 1);
}

/* Whether the loader's next micro-batch holds sequences first, first + 1, ... (B of them, each
 * wrapping over the pass of n) of the stream. */
static int next_matches(token_loader *loader, const seq_start *seqs, int n, long first, int B,
                        int T) {
  int32_t inputs[MAX_TOKENS], targets[MAX_TOKENS];
  st_status status = token_loader_next(loader, inputs, targets);
  CHECK_OK(status);
  if (status != ST_OK) return 0;
  int ok = 1;
  for (int b = 0; b < B; b++) {
    const seq_start q = seqs[(first + b) % n];
    for (int t = 0; t < T; t++) {
      ok &= inputs[b * T + t] == token_at(q.shard, q.offset + t);
      ok &= targets[b * T + t] == token_at(q.shard, q.offset + t + 1);
    }
  }
  return ok;
}

/* One rank reads two and a half passes of B x T micro-batches (the stream wraps twice); the
 * i-th must hold sequences i x B on, and a pass `sequences` of them. */
static void check_stream(int B, int T, int sequences) {
  seq_start seqs[256];
  const int n = pass_sequences(T, seqs);
  CHECK_EQ_INT(n, sequences);
  token_loader *loader = open_loader(B, T, 0, 1);
  if (!loader) return;
  CHECK_EQ_INT((int)token_loader_batches_per_pass(loader), n / B);
  for (int i = 0; i < n * 5 / (2 * B); i++) {
    CHECK_MSG(next_matches(loader, seqs, n, (long)i * B, B, T), "B %d T %d batch %d", B, T, i);
  }
  token_loader_close(loader);
}

/* T 8: 12, 16 and 9 sequences; micro-batches of 2 span the end of the third shard and the
 * wrap to the first. */
static void check_sequence_and_wrap_around(void) { check_stream(2, 8, 12 + 16 + 9); }

/* T 80: the third shard (80 tokens) holds no sequence of 81 and is skipped: the stream goes
 * from the second shard back to the first. */
static void check_short_shard_skipped(void) { check_stream(1, 80, 1 + 1 + 0); }

/* Ranks read disjoint slices whose union, in rank order, is exactly the global batch. */
static void check_data_parallel_slices(void) {
  enum { DP = 3, B = 2, T = 4 };
  seq_start seqs[256];
  const int n = pass_sequences(T, seqs);
  token_loader *ranks[DP];
  for (int r = 0; r < DP; r++) ranks[r] = open_loader(B, T, r, DP);
  for (int i = 0; i < n / (DP * B) + 2; i++) {
    for (int r = 0; r < DP && ranks[r]; r++) {
      CHECK_MSG(next_matches(ranks[r], seqs, n, (long)(i * DP + r) * B, B, T), "rank %d batch %d",
                r, i);
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
  enum { T = 4, G = 4 };
  seq_start seqs[256];
  const int n = pass_sequences(T, seqs);
  token_loader *single = open_loader(G, T, 0, 1);
  if (!single) return;
  int32_t inputs[G * T], targets[G * T];
  for (int i = 0; i < 7; i++) CHECK_OK(token_loader_next(single, inputs, targets));
  token_position saved = token_loader_tell(single);
  token_loader_close(single);
  for (int r = 0; r < 2; r++) {
    token_loader *rank = open_loader(2, T, r, 2);
    if (!rank) continue;
    CHECK_OK(token_loader_seek(rank, saved));
    for (int i = 7; i < 7 + n / G; i++) {
      CHECK_MSG(next_matches(rank, seqs, n, (long)i * G + 2 * r, 2, T), "rank %d batch %d", r, i);
    }
    token_loader_close(rank);
  }
}

/* GA micro-batches on DP ranks: micro-batch k of rank r of global batch i holds sequences
 * i x G + (k x DP + r) x B on (G = GA x DP x B), shard ends included: at T 8 the third shard
 * holds 9 sequences, so global batches of 2 span it and the first. Each such split reads what
 * the others read, as one rank without accumulation would. */
static void check_accumulation(int DP, int GA) {
  enum { B = 1, T = 8 };
  seq_start seqs[256];
  const int n = pass_sequences(T, seqs), G = GA * DP * B;
  for (int r = 0; r < DP; r++) {
    token_loader *loader = open_accumulating(B, T, r, DP, GA);
    if (!loader) return;
    CHECK_EQ_INT((int)token_loader_batches_per_pass(loader), n / G);
    for (int i = 0; i < n * 3 / (2 * G); i++) {
      for (int k = 0; k < GA; k++) {
        CHECK_MSG(next_matches(loader, seqs, n, (long)i * G + (k * DP + r) * B, B, T),
                  "dp %d x %d micro-batches: rank %d batch %d micro-batch %d", DP, GA, r, i, k);
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
