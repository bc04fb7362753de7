/* lazy_step_test.c - the training step's stream ordering on the GPU path, run on the CPU: the
 * lazy device (tests/core/lazy_device.h) keeps device memory apart from the host's, as a GPU
 * does, and runs queued copies, fills, kernels (tests/kernels/deferred_ops.h) and collectives
 * (tests/sharding/lazy_comm.h) only when CUDA would have to, so a missing event wait, host sync or
 * buffer hand-off reads stale or foreign data. Each case trains 4 steps of a small GPT on 1, 2 or 4
 * ranks on the CPU device and on the lazy device (as late as allowed, and with random streams run
 * ahead under 3 seeds), from the same weights and batches, and requires the same losses and
 * gradient norms bit for bit at every step, the same master weights and Adam moments at the end,
 * the same exported file, checkpoint manifest (every file's SHA-256) and (tp 1) generation
 * logits, a resume from the checkpoint that repeats the last steps bit for bit, and that the lazy
 * run really deferred copies. Two of the lazy runs (the latest policy's, random seed 2's) save
 * in the background (ckpt_writer.h): the steps after the save go on while its files are written
 * (each write held back 20 ms before it starts, so the steps after the save have changed the states
 * before it reads its snapshot), and the files must still hold the states of the step saved. The
 * cases cover what the GPU path does that the CPU device's does not: token uploads and scalar
 * read-backs through stream copies, ZeRO stages 0-3 with prefetch and without resharding, bf16 and
 * fp16 parameters with their compute copies and fp32 gradients, a dynamic loss scale with a skipped
 * step, the offloaded optimizer's staged chunk pipeline (copies down, host AdamW, copies up; at
 * stages 0-3 and tp 2, through partial chunks and a unit shorter than one), activation recompute,
 * gradient accumulation, tp 2 and replicas (hybrid sharding). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/ckpt_writer.h"
#include "engine/model/gpt_io.h"
#include "engine/model/gpt_kv.h"
#include "sharding/mesh.h"
#include "tests/core/lazy_device.h"
#include "tests/engine/test_files.h"
#include "tests/kernels/deferred_ops.h"
#include "tests/sharding/lazy_comm.h"
#include "tests/testing_mpi.h"
#include "tests/train/test_step.h"

enum {
  B = 2,
  T = 16,
  STEPS = 4,
  SAVED_AT = 2,
  MAX_ACCUM = 2,
  STATE = 3,
  SEEDS = 3,
  VOCAB = 256,
  FED = 4
};

typedef struct step_case {
  const char *name;
  int tp; /* tp group size; the ranks left are shard groups, R of them */
  int stage, prefetch, reshard;
  st_dtype param, reduce;
  int offload;
  gpt_recompute recompute;
  int grad_accum;
  int skip_step; /* an overflow injected at this step (fp16); -1: none */
  int replicas;  /* R: replicate groups of the shard groups */
} step_case;

typedef struct run_result {
  step_stats stats[STEPS];
  float *state; /* masters, m and v of every unit, end to end */
  size_t state_numel;
  unsigned char *exported; /* rank 0: the file gpt_export wrote after the steps */
  size_t exported_size;
  float logits[FED][VOCAB]; /* tp 1: the generation forward's, after the export */
  char ckpt[512];           /* the checkpoint of SAVED_AT steps */
  unsigned char *manifest;  /* rank 0: its manifest.json */
  size_t manifest_size;
} run_result;

/* Masters, m and v, read through the device's copies once every stream the step used is done. */
static void read_state(gpt_model *m, run_result *r) {
  r->state_numel = 0;
  for (int u = 0; u < m->n_units; u++) r->state_numel += STATE * (size_t)m->units[u].owned_numel;
  r->state = malloc(r->state_numel * sizeof *r->state);
  CHECK_OK(gpt_step_end(m));
  float *at = r->state;
  for (int u = 0; u < m->n_units; u++) {
    unit *x = &m->units[u];
    CHECK_OK(stream_sync(&x->stream));
    const float *parts[STATE] = {x->master, x->adam_m, x->adam_v};
    for (int k = 0; k < STATE; k++) {
      CHECK_OK(stream_memcpy(&x->stream, at, parts[k], (size_t)x->owned_numel * sizeof *at));
      at += x->owned_numel;
    }
  }
}

/* The generation forward (gpt_kv: its own cache, tokens up and logits down through stream
 * copies): a prompt of 5 tokens, then 3 more one at a time, the last logits of each call. */
static void generate(gpt_model *m, run_result *r) {
  gpt_kv *kv = NULL;
  CHECK_OK(gpt_kv_create(&kv, m, T, 1));
  if (!kv) return;
  const int32_t prompt[5] = {3, 141, 59, 26, 53};
  CHECK_OK(gpt_kv_forward(kv, prompt, 5, 1, r->logits[0]));
  for (int i = 1; i < FED; i++) {
    const int32_t next = (int32_t)(17 * i);
    CHECK_OK(gpt_kv_forward(kv, &next, 1, 1, r->logits[i]));
  }
  gpt_kv_destroy(kv);
}

/* The staged pipeline's edges that this model's sizes give on every mesh here: a unit whose
 * owned range ends in a partial chunk and a unit shorter than one chunk (ln_f, its whole range a
 * single short chunk). No owned range is empty: unit_layout.c pads a unit to a multiple of
 * S x UNIT_ALIGN elements and each rank owns an S-th, at least UNIT_ALIGN of them. */
static void check_chunks(const gpt_model *m, const step_case *c) {
  int partial = 0, shorter = 0;
  for (int u = 0; u < m->n_units; u++) {
    const int64_t owned = m->units[u].owned_numel;
    const int64_t chunk = m->units[u].streams->offload.chunk_numel;
    partial += owned > chunk && owned % chunk != 0;
    shorter += owned < chunk;
  }
  CHECK_MSG(partial > 0 && shorter > 0,
            "%s: %d units end in a partial chunk, %d are shorter than one: both are needed",
            c->name, partial, shorter);
}

static gpt_model *open_model(const st_device *dev, const st_mesh *mesh, const step_case *c) {
  gpt_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab = VOCAB, .max_seq = T};
  CHECK_OK(gpt_config_finish(&cfg, c->tp));
  const gpt_parallel par = {.mesh = mesh,
                            .stage = c->stage,
                            .prefetch = c->prefetch,
                            .reshard_after_forward = c->reshard,
                            .precision = {c->param, c->reduce},
                            .offload_optimizer = c->offload,
                            .recompute = c->recompute};
  gpt_model *m = NULL;
  CHECK_OK(gpt_create(&m, &cfg, dev, B, T, &par));
  /* On the lazy device the kernels too are queued (the units borrow this backend). */
  if (m && !dev->backend->device_memory_is_host) m->kb->ops = deferred_ops();
  /* Chunks of 100 elements: the staged pipeline runs many, with its ring of events wrapping. */
  for (int u = 0; m && u < m->n_units; u++) m->units[u].streams->offload.chunk_numel = 100;
  if (m && c->offload) check_chunks(m, c);
  return m;
}

/* A run's batches: each data-parallel rank its own (a tp group shares one), moved on after each
 * step in the same host arrays, so an upload not yet taken from them would see the next. */
typedef struct batches {
  int count;
  int32_t inputs[MAX_ACCUM][B * T], targets[MAX_ACCUM][B * T];
} batches;

static void batches_init(batches *b, int count, int dp_rank) {
  b->count = count;
  for (int a = 0; a < count; a++) {
    test_step_tokens(b->inputs[a], b->targets[a], B * T);
    for (int i = 0; i < B * T; i++)
      b->inputs[a][i] = (b->inputs[a][i] + 31 * a + 13 * dp_rank) % 256;
  }
}

static void step_on(gpt_model *m, const train_hparams *h, loss_scaler *scaler, int step, batches *b,
                    step_stats *out) {
  const int32_t *in[MAX_ACCUM], *tg[MAX_ACCUM];
  for (int a = 0; a < b->count; a++) in[a] = b->inputs[a], tg[a] = b->targets[a];
  CHECK_OK(train_step(m, h, scaler, step, in, tg, out));
  for (int a = 0; a < b->count; a++) {
    for (int i = 0; i < B * T; i++) b->inputs[a][i] = (b->inputs[a][i] + 1) % 256;
  }
}

/* Begins the checkpoint of `step` steps (blocking: its files staged through device copies;
 * in the background: from a snapshot, written while the next steps run). */
static void save(ckpt_writer *w, gpt_model *m, const step_case *c, const train_hparams *h,
                 const loss_scaler *s, const st_mesh_coords *at, int step) {
  ckpt_manifest run = {.step = step,
                       .cfg = m->cfg,
                       .R = at->R,
                       .S = at->S,
                       .T = at->T,
                       .zero = c->stage,
                       .param_dtype = c->param,
                       .reduce_dtype = c->reduce,
                       .scaler = s->state,
                       .micro_batch = B,
                       .h = *h,
                       .seed = 7,
                       .dp_size = at->R * at->S};
  snprintf(run.model, sizeof run.model, "lazy");
  token_position data = {0};
  run.data = &data;
  char dir[512];
  test_make_dir(dir, sizeof dir, "lazy_step_ckpt");
  CHECK_OK(ckpt_writer_save(w, &run, dir, 1));
}

/* Once the save is committed: rank 0 keeps its manifest, which holds every file's SHA-256. */
static void keep_manifest(ckpt_writer *w, int world_rank, const step_case *c, run_result *r) {
  CHECK_OK(ckpt_writer_poll(w, 1, STEPS));
  snprintf(r->ckpt, sizeof r->ckpt, "%s", ckpt_writer_saved(w));
  if (world_rank == 0) {
    char manifest[600];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", r->ckpt);
    r->manifest = test_read_file(manifest, &r->manifest_size);
    CHECK_MSG(r->manifest && r->manifest_size > 0, "%s: %s written", c->name, manifest);
  }
}

static void train(const st_device *dev, const st_mesh *mesh, const step_case *c, int background,
                  run_result *r) {
  gpt_model *m = open_model(dev, mesh, c);
  if (!m) return;
  ckpt_writer *w = NULL;
  CHECK_OK(ckpt_writer_create(&w, m, background));
  if (!w) {
    gpt_destroy(m);
    return;
  }
  CHECK_OK(gpt_init_params(m, 7));
  CHECK_OK(train_state_reset(m));
  loss_scaler scaler;
  if (c->param == ST_FP16) {
    loss_scaler_init_dynamic(&scaler, 65536.0, 2000);
  } else {
    loss_scaler_init_none(&scaler);
  }
  st_mesh_coords at;
  CHECK_OK(st_mesh_get_coords(mesh, &at));
  batches b, b_saved;
  batches_init(&b, c->grad_accum, at.r * at.S + at.s);
  train_hparams h = test_step_hparams((int64_t)c->grad_accum * B * T * at.R * at.S);
  h.grad_accum = c->grad_accum;
  if (c->skip_step >= 0) {
    char inject[32];
    snprintf(inject, sizeof inject, "%d:0", c->skip_step);
    CHECK(setenv("ST_TEST_INJECT_OVERFLOW", inject, 1) == 0);
  }
  loss_scaler scaler_saved = scaler;
  for (int step = 0; step < STEPS; step++) {
    if (step == SAVED_AT) {
      save(w, m, c, &h, &scaler, &at, step);
      scaler_saved = scaler;
      b_saved = b;
    }
    step_on(m, &h, &scaler, step, &b, &r->stats[step]);
    CHECK_OK(ckpt_writer_poll(w, 0, step + 1));
  }
  keep_manifest(w, at.world_rank, c, r);
  ckpt_writer_destroy(w);
  read_state(m, r);
  /* The export gathers the masters through device buffers (a staged one when offloaded). */
  char path[512];
  test_tmp_path(path, sizeof path, "lazy_step_export.safetensors");
  CHECK_OK(gpt_export(m, path, at.world_rank == 0));
  if (at.world_rank == 0) {
    r->exported = test_read_file(path, &r->exported_size);
    CHECK_MSG(r->exported && r->exported_size > 0, "%s: %s written", c->name, path);
  }
  if (c->tp == 1) generate(m, r);
  gpt_destroy(m);

  /* Resumed from the checkpoint in a new model, the last steps again, bit for bit. */
  m = open_model(dev, mesh, c);
  if (!m) return;
  ckpt_source *src = NULL;
  CHECK_OK(ckpt_source_open(&src, r->ckpt));
  if (src) CHECK_OK(ckpt_restore(m, src));
  ckpt_source_close(src);
  for (int step = SAVED_AT; step < STEPS; step++) {
    step_stats again;
    step_on(m, &h, &scaler_saved, step, &b_saved, &again);
    CHECK_MSG(again.loss == r->stats[step].loss && again.skipped == r->stats[step].skipped,
              "%s on %s: step %d resumed from step %d: loss %.9g vs %.9g", c->name,
              dev->backend->name, step, SAVED_AT, again.loss, r->stats[step].loss);
  }
  CHECK(unsetenv("ST_TEST_INJECT_OVERFLOW") == 0);
  gpt_destroy(m);
  MPI_Barrier(MPI_COMM_WORLD); /* rank 0 has read the files before the next run rewrites them */
}

/* The same bits as the CPU device's run, step by step and in the final state. */
static void check_same(const step_case *c, const char *how, const run_result *want,
                       const run_result *got) {
  for (int s = 0; s < STEPS; s++) {
    const step_stats *a = &want->stats[s], *b = &got->stats[s];
    const int same_norm = a->grad_norm == b->grad_norm || (a->skipped && b->skipped);
    CHECK_MSG(a->loss == b->loss && same_norm && a->skipped == b->skipped,
              "%s, %s, step %d: loss %.9g vs %.9g, norm %.9g vs %.9g, skipped %d vs %d", c->name,
              how, s, b->loss, a->loss, b->grad_norm, a->grad_norm, b->skipped, a->skipped);
  }
  CHECK_MSG(got->state_numel == want->state_numel &&
                memcmp(got->state, want->state, want->state_numel * sizeof *want->state) == 0,
            "%s, %s: the master weights and Adam moments after %d steps", c->name, how, STEPS);
  CHECK_MSG(
      got->exported_size == want->exported_size &&
          (!want->exported || memcmp(got->exported, want->exported, want->exported_size) == 0),
      "%s, %s: the exported file", c->name, how);
  CHECK_MSG(
      got->manifest_size == want->manifest_size &&
          (!want->manifest || memcmp(got->manifest, want->manifest, want->manifest_size) == 0),
      "%s, %s: the checkpoint's manifest (its files' SHA-256)", c->name, how);
}

/* The case's mesh; with `lazy` given, every group's communicator is wrapped in a lazy_comm on
 * it, so the collectives too are queued in stream order, as NCCL's. */
static st_mesh *open_mesh(const step_case *c, int world, const st_device *lazy) {
  st_mesh_config mc = ST_MESH_CONFIG_INIT;
  mc.tp = c->tp;
  mc.dp_replicate = c->replicas;
  mc.dp_shard = world / (c->tp * c->replicas);
  mc.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &mc));
  for (int g = 0; mesh && lazy && g < ST_GROUP_COUNT; g++) {
    comm *ordered = NULL;
    CHECK_OK(lazy_comm_create(&ordered, lazy, mesh_comm(mesh, (st_group)g)));
    if (ordered) mesh_swap_comm(mesh, (st_group)g, ordered);
  }
  return mesh;
}

static void check_case(const step_case *c, int world) {
  const st_device cpu = device_cpu();
  run_result want = {0};
  st_mesh *mesh = open_mesh(c, world, NULL);
  if (!mesh) return;
  train(&cpu, mesh, c, 0, &want);
  st_mesh_destroy(mesh);
  if (c->skip_step >= 0) {
    CHECK_MSG(want.stats[c->skip_step].skipped, "%s: the injected step was skipped", c->name);
  }
  for (int k = 0; k <= SEEDS; k++) {
    /* The model and the communicators keep a pointer to the device: it outlives them. */
    const st_device lazy = lazy_device(k == 0 ? LAZY_LATEST : LAZY_RANDOM, (uint64_t)k);
    char how[32];
    snprintf(how, sizeof how, k == 0 ? "latest" : "random seed %d", k);
    run_result got = {0};
    mesh = open_mesh(c, world, &lazy);
    if (!mesh) break;
    train(&lazy, mesh, c, k % 2 == 0, &got);
    st_mesh_destroy(mesh);
    CHECK_OK(deferred_ops_status());
    const lazy_counts n = lazy_device_counts();
    CHECK_MSG(n.ran_late > 0, "%s, %s: %ld copies and fills queued, none ran late", c->name, how,
              n.queued);
    check_same(c, how, &want, &got);
    free(got.state);
    free(got.exported);
    free(got.manifest);
  }
  free(want.state);
  free(want.exported);
  free(want.manifest);
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  CHECK(setenv("ST_CKPT_TEST_DELAY_MS", "20", 1) == 0);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const step_case cases[] = {
      {"zero0 fp32", 1, 0, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"zero1 fp32", 1, 1, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"zero2 bf16/fp32, 2 micro-batches", 1, 2, 1, 1, ST_BF16, ST_FP32, 0, GPT_RECOMPUTE_NONE, 2,
       -1, 1},
      {"zero3 fp32", 1, 3, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"zero3 bf16, prefetch 2, kept gathered", 1, 3, 2, 0, ST_BF16, ST_BF16, 0, GPT_RECOMPUTE_NONE,
       1, -1, 1},
      {"zero3 fp16, skipped step 1", 1, 3, 1, 1, ST_FP16, ST_FP16, 0, GPT_RECOMPUTE_NONE, 1, 1, 1},
      {"zero0 bf16/fp32, offloaded", 1, 0, 1, 1, ST_BF16, ST_FP32, 1, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"zero1 fp32, offloaded", 1, 1, 1, 1, ST_FP32, ST_FP32, 1, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"zero3 bf16, offloaded, 2 micro-batches", 1, 3, 1, 1, ST_BF16, ST_BF16, 1,
       GPT_RECOMPUTE_NONE, 2, -1, 1},
      {"zero2 fp16, offloaded, skipped step 2", 1, 2, 1, 1, ST_FP16, ST_FP16, 1, GPT_RECOMPUTE_NONE,
       1, 2, 1},
      {"zero3 fp32, recompute block", 1, 3, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_BLOCK, 1, -1,
       1},
      {"zero0 bf16, recompute gelu", 1, 0, 1, 1, ST_BF16, ST_BF16, 0, GPT_RECOMPUTE_GELU, 1, -1, 1},
      {"tp2 zero0 fp32", 2, 0, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"tp2 zero1 fp32, offloaded", 2, 1, 1, 1, ST_FP32, ST_FP32, 1, GPT_RECOMPUTE_NONE, 1, -1, 1},
      {"tp2 zero3 bf16, recompute block", 2, 3, 1, 1, ST_BF16, ST_BF16, 0, GPT_RECOMPUTE_BLOCK, 1,
       -1, 1},
      {"hybrid zero3 fp32, 2 replicas", 1, 3, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 1, -1,
       2},
      {"hybrid zero2 bf16/fp32, 2 replicas, offloaded", 1, 2, 1, 1, ST_BF16, ST_FP32, 1,
       GPT_RECOMPUTE_NONE, 1, -1, 2},
      {"tp2 hybrid zero3 fp16, 2 replicas, skipped step 1", 2, 3, 1, 1, ST_FP16, ST_FP16, 0,
       GPT_RECOMPUTE_NONE, 1, 1, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (world % (cases[i].tp * cases[i].replicas) == 0) check_case(&cases[i], world);
  }
  const int failed = test_finish_mpi("lazy_step_test");
  st_finalize();
  return failed;
}
