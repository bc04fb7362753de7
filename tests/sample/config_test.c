/* config_test.c - the model config read back from a file (gpt_config_from_file), what
 * `shardtrain sample` builds its model from: an export records n_head in its metadata and every
 * other dimension in its shapes, so it reads back whole; an explicit n_head must agree with the
 * metadata; a file without the metadata takes the named config's heads when its depth and width
 * are a named config's, and is refused (asking for the heads) when they are not; damaged
 * metadata or missing tables are refused naming the file. */
#include <stdio.h>
#include <string.h>

#include "engine/io/safetensors.h"
#include "engine/model/gpt_io.h"
#include "tests/engine/test_files.h"
#include "tests/sample/sample_testing.h"
#include "tests/testing.h"

static float zeros[64 * 1024];

/* A file with wte [vocab, C], wpe [positions, C], one tensor per block as large as a block's
 * parameters (12 C^2 + 13 C) and ln_f's two, `meta` as given: the shapes the config is read
 * from, and as many values as the model has parameters (fewer are refused). */
static void write_shapes(const char *path, int n_layer, int C, int vocab, int positions,
                         const char *n_head_meta, int with_wte) {
  safetensors_tensor t[8];
  char names[8][32];
  int n = 0;
  if (with_wte) t[n++] = (safetensors_tensor){"wte.weight", SAFETENSORS_F32, 2, {vocab, C}, zeros};
  t[n++] = (safetensors_tensor){"wpe.weight", SAFETENSORS_F32, 2, {positions, C}, zeros};
  for (int l = 0; l < n_layer; l++, n++) {
    snprintf(names[n], sizeof names[n], "h.%d.ln_1.weight", l);
    t[n] = (safetensors_tensor){names[n], SAFETENSORS_F32, 1, {12 * C * C + 13 * C}, zeros};
  }
  t[n++] = (safetensors_tensor){"ln_f.weight", SAFETENSORS_F32, 1, {C}, zeros};
  t[n++] = (safetensors_tensor){"ln_f.bias", SAFETENSORS_F32, 1, {C}, zeros};
  safetensors_metadata meta[] = {{GPT_META_N_HEAD, n_head_meta}};
  CHECK_OK(safetensors_write(path, t, (size_t)n, n_head_meta ? meta : NULL, n_head_meta ? 1 : 0));
}

static void check_export_reads_back(void) {
  const gpt_config cfg = {.n_layer = 3, .n_head = 2, .n_embd = 24, .vocab = 300, .max_seq = 20};
  gpt_model *m = test_model(cfg, 1, TEST_WEIGHTS_INIT, 1);
  char path[512];
  test_tmp_path(path, sizeof path, "export.safetensors");
  CHECK_OK(gpt_export(m, path, 1));
  safetensors_reader *r = NULL;
  CHECK_OK(safetensors_reader_open(&r, path));
  const char *recorded = r ? safetensors_reader_metadata(r, GPT_META_N_HEAD) : NULL;
  CHECK_MSG(recorded && strcmp(recorded, "2") == 0, "the export records n_head 2: %s",
            recorded ? recorded : "(none)");
  CHECK(r && strcmp(safetensors_reader_metadata(r, "format"), "pt") == 0);
  safetensors_reader_close(r);

  gpt_config got;
  CHECK_OK(gpt_config_from_file(path, 0, &got));
  CHECK_EQ_INT(got.n_layer, 3);
  CHECK_EQ_INT(got.n_head, 2);
  CHECK_EQ_INT(got.n_embd, 24);
  CHECK_EQ_INT(got.vocab, 300);
  CHECK_EQ_INT(got.vocab_padded, m->cfg.vocab_padded);
  CHECK_EQ_INT(got.max_seq, 20);
  /* An explicit n_head that agrees with the metadata is taken; one that contradicts it would
   * give another model from the same tensors, and is refused naming both. */
  CHECK_OK(gpt_config_from_file(path, 2, &got));
  CHECK_EQ_INT(got.n_head, 2);
  CHECK_STATUS(gpt_config_from_file(path, 3, &got), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "records n_head 2") &&
                strstr(st_last_error(), "asks for n_head 3") && strstr(st_last_error(), path),
            "detail: %s", st_last_error());
  gpt_destroy(m);
}

static void check_without_metadata(void) {
  char path[512];
  gpt_config got;
  test_tmp_path(path, sizeof path, "tiny_shape.safetensors");
  write_shapes(path, 2, 64, 256, 64, NULL, 1); /* tiny's depth and width */
  CHECK_OK(gpt_config_from_file(path, 0, &got));
  CHECK_EQ_INT(got.n_head, 4);
  write_shapes(path, 2, 48, 256, 64, NULL, 1); /* no named config is 2 x 48 */
  CHECK_STATUS(gpt_config_from_file(path, 0, &got), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "n_layer 2, n_embd 48 is not a named config's shape"),
            "detail: %s", st_last_error());
  CHECK_OK(gpt_config_from_file(path, 6, &got));
  CHECK_EQ_INT(got.n_head, 6);
  CHECK_STATUS(gpt_config_from_file(path, 5, &got), ST_ERR_INVALID_ARG);
  CHECK_MSG(strstr(st_last_error(), "n_embd 48 is not divisible by n_head 5") &&
                strstr(st_last_error(), path),
            "detail: %s", st_last_error());
}

static void check_refusals(void) {
  char path[512];
  gpt_config got;
  test_tmp_path(path, sizeof path, "damaged.safetensors");
  write_shapes(path, 2, 64, 256, 64, "four", 1);
  CHECK_STATUS(gpt_config_from_file(path, 0, &got), ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), "metadata shardtrain.n_head is 'four'"), "detail: %s",
            st_last_error());
  write_shapes(path, 2, 64, 256, 64, "4", 0);
  CHECK_STATUS(gpt_config_from_file(path, 0, &got), ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), "tensor 'wte.weight' is missing"), "detail: %s",
            st_last_error());
  write_shapes(path, 0, 64, 256, 64, "4", 1);
  CHECK_STATUS(gpt_config_from_file(path, 0, &got), ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), "no transformer blocks"), "detail: %s", st_last_error());
  test_tmp_path(path, sizeof path, "missing.safetensors");
  CHECK_STATUS(gpt_config_from_file(path, 0, &got), ST_ERR_IO);
}

int main(void) {
  check_export_reads_back();
  check_without_metadata();
  check_refusals();
  return test_finish("config_test");
}
