/* prepare_bytes_test - proves tools/prepare_bytes.py writes shards the engine reads as intended.
 *
 * The tool is run on a directory of two text files plus the .dat and .u8 companions the
 * fortunes package keeps beside them (which must be skipped). Proven: the printed counts are
 * right; the printed unigram entropy equals one computed here from the validation bytes; and
 * the token loader, reading the validation shard and the training shards, yields exactly the
 * bytes of the concatenated text, split where the flags say (the first quarter for validation,
 * training shards of 200 tokens).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/token_data.h"
#include "tests/engine/test_files.h"
#include "tests/testing.h"

enum { SHARD_TOKENS = 200, T = 8 };

static char text[1024]; /* the two text files, 300 bytes each, concatenated in name order */
static size_t text_len;

static void make_inputs(const char *dir) {
  static const char *const names[] = {"a", "b", "a.dat", "a.u8"};
  char path[700];
  for (int f = 0; f < 4; f++) {
    char content[512];
    int n = 0;
    for (int line = 0; n < 300; line++) { /* 10 lines of 30 bytes */
      n += snprintf(content + n, sizeof content - n, "%s line %d: the quick brown fox\n", names[f],
                    line);
    }
    snprintf(path, sizeof path, "%s/%s", dir, names[f]);
    test_write_file(path, content, (size_t)n);
    if (f < 2) {
      memcpy(text + text_len, content, (size_t)n);
      text_len += (size_t)n;
    }
  }
}

static double entropy_nats(const unsigned char *bytes, size_t n) {
  double counts[256] = {0}, h = 0;
  for (size_t i = 0; i < n; i++) counts[bytes[i]]++;
  for (int b = 0; b < 256; b++) {
    if (counts[b] > 0) h -= counts[b] / n * log(counts[b] / n);
  }
  return h;
}

/* Reads one pass of `batches` batches over the shards matching `pattern` (shard k holds
 * `expected` from k * shard_tokens on), then checks that the next batch starts over. */
static void check_stream(const char *pattern, const char *expected, size_t shard_tokens,
                         int batches) {
  token_loader_config config = {pattern, 1, T, 0, 1, 256, 1, 0};
  token_loader *loader = NULL;
  CHECK_OK(token_loader_open(&loader, &config));
  if (!loader) return;
  for (int b = 0; b <= batches; b++) {
    int32_t inputs[T], targets[T];
    CHECK_OK(token_loader_next(loader, inputs, targets));
    token_position after = token_loader_tell(loader);
    size_t start = after.shard * shard_tokens + after.offset - T;
    if (b == batches) {
      CHECK_EQ_INT(start, 0);
      break;
    }
    for (int i = 0; i < T; i++) {
      CHECK_EQ_INT(inputs[i], (unsigned char)expected[start + i]);
      CHECK_EQ_INT(targets[i], (unsigned char)expected[start + i + 1]);
    }
  }
  token_loader_close(loader);
}

int main(void) {
  char input_dir[512], out_dir[512], command[2048], pattern[600];
  test_make_dir(input_dir, sizeof input_dir, "prep_in");
  test_tmp_path(out_dir, sizeof out_dir, "prep_out");
  make_inputs(input_dir);
  size_t val_len = text_len / 4, train_len = text_len - val_len;

  snprintf(command, sizeof command,
           "python3 tools/prepare_bytes.py '%s' --out-dir '%s' --prefix t --val-fraction 0.25 "
           "--shard-tokens %d",
           input_dir, out_dir, SHARD_TOKENS);
  FILE *tool = popen(command, "r");
  char output[4096] = {0};
  size_t got = tool ? fread(output, 1, sizeof output - 1, tool) : 0;
  int exit_status = tool ? pclose(tool) : -1;
  CHECK_EQ_INT(exit_status, 0);
  output[got] = '\0';
  printf("%s", output);

  char want[256];
  snprintf(want, sizeof want, "read 2 files, %zu bytes\n", text_len);
  CHECK_MSG(strstr(output, want) != NULL, "missing '%s'", want);
  snprintf(want, sizeof want, "train: %zu tokens in %zu shards\n", train_len,
           (train_len + SHARD_TOKENS - 1) / SHARD_TOKENS);
  CHECK_MSG(strstr(output, want) != NULL, "missing '%s'", want);
  snprintf(want, sizeof want, "val: %zu tokens in 1 shard\n", val_len);
  CHECK_MSG(strstr(output, want) != NULL, "missing '%s'", want);
  const char *entropy_line = strstr(output, "val unigram entropy: ");
  double printed = entropy_line ? atof(entropy_line + strlen("val unigram entropy: ")) : -1;
  CHECK_NEAR(printed, entropy_nats((const unsigned char *)text, val_len), 1e-6);

  snprintf(pattern, sizeof pattern, "%s/t_val_*.bin", out_dir);
  check_stream(pattern, text, val_len, (int)((val_len - 1) / T));
  snprintf(pattern, sizeof pattern, "%s/t_train_*.bin", out_dir);
  int train_batches = 0;
  for (size_t start = 0; start < train_len; start += SHARD_TOKENS) {
    size_t shard_len = train_len - start < SHARD_TOKENS ? train_len - start : SHARD_TOKENS;
    train_batches += (int)((shard_len - 1) / T);
  }
  check_stream(pattern, text + val_len, SHARD_TOKENS, train_batches);
  return test_finish("prepare_bytes_test");
}
