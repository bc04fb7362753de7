/* unit_streams_test.c - the order of a unit's stream waits and event records, on the logging
 * fake device with a fake two-rank collective backend that notes each collective on the stream
 * it is ordered on and completes it by an event there (as NCCL does). Checked, for one
 * stage-3 unit with a replicate group: G waits for the buffer's last readers before a gather;
 * C waits gathered(u) before the unit's compute; R waits grads-ready(u), recorded on C, before
 * the reduce-scatter; the replicate all-reduce follows on R; C waits reduced(u); the full
 * gradients go back to the pool after R's work; the watchdog drains every collective; the pool
 * keeps its buffers, so a second step allocates nothing. Stage 0 adds the all-gather of the
 * reduced shards on R; stage 1 publishes on G after C's reads. Every wait of C on a collective
 * is bracketed by a pair of timed events recorded on C (sharding/comm_exposure.h), and the
 * step's end sums exactly those pairs. Nothing leaks, also when any one allocation fails. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "sharding/unit.h"
#include "tests/sharding/fake_device.h"
#include "tests/testing.h"

/* ---- a fake collective backend: two ranks, this one rank 0 --------------------------------- */

typedef struct fake_comm {
  st_device dev;
  int tested; /* collectives completed through test */
} fake_comm;

typedef struct fake_work {
  st_event done;
} fake_work;

static st_status enqueue(void *vctx, const st_stream *stream, comm_work *work, const char *what) {
  fake_comm *ctx = vctx;
  fake_log_note(stream, what);
  fake_work *w = (fake_work *)work->backend_state;
  ST_CHECK(event_create(&ctx->dev, &w->done));
  return event_record(&w->done, stream);
}

static st_status fake_all_gather(void *ctx, const void *send, void *recv, size_t count,
                                 st_dtype dtype, const st_stream *stream, comm_work *work) {
  memmove(recv, send, count * dtype_size(dtype)); /* rank 0's piece */
  return enqueue(ctx, stream, work, "all_gather");
}

static st_status fake_reduce_scatter(void *ctx, const void *send, void *recv, size_t count,
                                     st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                     comm_work *work) {
  (void)op;
  memmove(recv, send, count * dtype_size(dtype));
  return enqueue(ctx, stream, work, "reduce_scatter");
}

static st_status fake_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                 st_dtype dtype, comm_reduce_op op, const st_stream *stream,
                                 comm_work *work) {
  (void)op;
  memmove(recv, send, count * dtype_size(dtype));
  return enqueue(ctx, stream, work, "all_reduce");
}

static st_status fake_test(void *vctx, comm_work *work, int *done) {
  fake_comm *ctx = vctx;
  event_destroy(&((fake_work *)work->backend_state)->done);
  ctx->tested++;
  *done = 1;
  return ST_OK;
}

static const st_event *fake_done_event(void *ctx, comm_work *work) {
  (void)ctx;
  return &((fake_work *)work->backend_state)->done;
}

static st_status fake_dup(void *vctx, void **out) {
  const fake_comm *ctx = vctx;
  fake_comm *dup = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&dup, sizeof *dup, MEM_HOST, MEM_WORKSPACE, NULL));
  dup->dev = ctx->dev;
  *out = dup;
  return ST_OK;
}

static void fake_abort(void *ctx) { (void)ctx; }
static void fake_destroy(void *ctx) { mem_free(ctx); }

static const comm_backend fake_comm_backend = {
    .name = "fake",
    .all_gather = fake_all_gather,
    .reduce_scatter = fake_reduce_scatter,
    .all_reduce = fake_all_reduce,
    .test = fake_test,
    .done_event = fake_done_event,
    .dup = fake_dup,
    .abort = fake_abort,
    .destroy = fake_destroy,
};

static st_status fake_comm_create(comm **out, const st_device *dev, const char *name) {
  fake_comm *ctx = NULL;
  ST_CHECK(mem_alloc_zeroed((void **)&ctx, sizeof *ctx, MEM_HOST, MEM_WORKSPACE, NULL));
  ctx->dev = *dev;
  return comm_create(out, &fake_comm_backend, ctx, name, 0, 2, 10.0);
}

/* ---- the schedule ------------------------------------------------------------------------- */

typedef struct rig {
  st_device dev;
  st_stream compute;
  comm *shard, *replicate;
  unit_streams streams;
  unit u;
  int c, g, r; /* stream ids */
} rig;

/* A unit of the rig's groups at `stage` on its streams. */
static void rig_unit(rig *k, unit *u, const char *name, int stage) {
  const unit_groups groups = {k->shard, k->replicate};
  CHECK_OK(unit_init(u, name, &k->dev, stage, NULL, &groups, 1, 0));
  CHECK_OK(unit_share_streams(u, &k->streams));
  const int64_t shape[2] = {8, 8};
  CHECK_OK(unit_declare(u, "w", 2, shape, TP_REPLICATED, 1, NULL));
  CHECK_OK(unit_allocate(u));
}

static void rig_open(rig *k, int stage) {
  k->dev = fake_device();
  CHECK_OK(stream_create(&k->dev, &k->compute));
  CHECK_OK(fake_comm_create(&k->shard, &k->dev, "shard"));
  CHECK_OK(fake_comm_create(&k->replicate, &k->dev, "replicate"));
  const unit_groups groups = {k->shard, k->replicate};
  CHECK_OK(unit_streams_create(&k->streams, &k->dev, &k->compute, &groups));
  rig_unit(k, &k->u, "u", stage);
  k->c = fake_stream_id(&k->compute);
  k->g = fake_stream_id(&k->streams.gather);
  k->r = fake_stream_id(&k->streams.reduce);
}

static void rig_close(rig *k) {
  unit_free(&k->u);
  unit_streams_destroy(&k->streams);
  comm_destroy(k->replicate);
  comm_destroy(k->shard);
  stream_destroy(&k->compute);
}

/* The event recorded right after the collective `what` noted on `stream` from `from` on, and
 * the index of that record; -1 when there is none. */
static int collective_event(int from, int stream, const char *what, int *event) {
  int at = fake_log_find(from, FAKE_NOTE, stream, 0, what);
  if (at < 0) return -1;
  const int rec = fake_log_find(at, FAKE_RECORD, stream, 0, NULL);
  *event = rec < 0 ? 0 : fake_log_at(rec)->event;
  return rec;
}

/* "stream waits for the event recorded at index rec", after it; returns the wait's index. */
static int waits_after(int rec, int stream) {
  if (rec < 0) return -1;
  return fake_log_find(rec + 1, FAKE_WAIT, stream, fake_log_at(rec)->event, NULL);
}

/* The record on `stream` nearest to entry `at`, before it (step -1) or after it (step 1); -1
 * when there is none. */
static int nearest_record(int at, int stream, int step) {
  for (int i = at + step; i >= 0 && i < fake_log_count(); i += step) {
    const fake_entry *e = fake_log_at(i);
    if (e->kind == FAKE_RECORD && e->stream == stream) return i;
  }
  return -1;
}

static int is_timed(int rec) {
  return rec >= 0 && fake_log_at(rec)->what && strcmp(fake_log_at(rec)->what, "timed") == 0;
}

/* C's wait at index `wait` lies between a timed record on C (the last record on C before it)
 * and another (the first after it), and neither is shared with another C wait. */
static void check_bracketed(int wait, int c, const char *what) {
  const int before = nearest_record(wait, c, -1), after = nearest_record(wait, c, 1);
  CHECK_MSG(is_timed(before) && is_timed(after), "%s: C's wait lies between timed records", what);
  if (before < 0 || after < 0) return;
  for (int i = before + 1; i < after; i++) {
    const fake_entry *e = fake_log_at(i);
    CHECK_MSG(i == wait || e->kind != FAKE_WAIT || e->stream != c,
              "%s: another wait of C inside the pair", what);
  }
}

/* The step end sums `pairs` pairs, and the next sums none. */
static void check_exposed(unit_streams *streams, int pairs) {
  CHECK(streams->comm_exposed_ms == pairs * FAKE_ELAPSED_MS);
  CHECK_OK(unit_streams_step_end(streams));
  CHECK(streams->comm_exposed_ms == 0.0);
}

static uint64_t live_blocks(void) {
  mem_stats s;
  mem_stats_get(&s);
  return s.live_blocks;
}

static void test_stage3(void) {
  const uint64_t blocks = live_blocks();
  rig k;
  rig_open(&k, 3);
  fake_log_clear();

  /* Forward: gather on G, C waits gathered(u). */
  CHECK_OK(unit_gather_start(&k.u));
  CHECK_OK(unit_gather_wait(&k.u));
  int gathered = 0;
  const int rec_gathered = collective_event(0, k.g, "all_gather", &gathered);
  CHECK_MSG(rec_gathered >= 0, "the all-gather is ordered on G");
  CHECK_MSG(waits_after(rec_gathered, k.c) >= 0, "C waits gathered(u)");
  check_bracketed(waits_after(rec_gathered, k.c), k.c, "forward gathered(u)");
  CHECK_MSG(fake_log_find(0, FAKE_NOTE, k.c, 0, NULL) < 0, "nothing collective on C");

  /* Release on C: the buffer goes back after C's work (not yet done on the device). */
  const int before_release = fake_log_count();
  unit_release(&k.u);
  const int free_rec = fake_log_find(before_release, FAKE_RECORD, k.c, 0, NULL);
  CHECK_MSG(free_rec >= 0, "release records buffer-free on C");
  CHECK_EQ_INT(k.streams.pool.count, 1);

  /* Backward: the new gather's buffer is the released one, after G waits buffer-free(u). */
  const int before_gather = fake_log_count();
  CHECK_OK(unit_gather_wait(&k.u));
  const int g_waits_free = waits_after(free_rec, k.g);
  int regathered = 0;
  const int rec_regathered = collective_event(before_gather, k.g, "all_gather", &regathered);
  CHECK_MSG(g_waits_free >= 0 && rec_regathered > g_waits_free,
            "G waits buffer-free(u) before the backward's gather");
  CHECK_MSG(waits_after(rec_regathered, k.c) >= 0, "C waits the backward's gathered(u)");
  check_bracketed(waits_after(rec_regathered, k.c), k.c, "backward gathered(u)");

  /* Reduction: C records grads-ready, R waits it, then reduce-scatter and replicate on R. */
  CHECK_OK(unit_grads_begin(&k.u));
  const int before_reduce = fake_log_count();
  CHECK_OK(unit_reduce_start(&k.u));
  const int ready = fake_log_find(before_reduce, FAKE_RECORD, k.c, 0, NULL);
  const int r_waits = waits_after(ready, k.r);
  int scattered = 0;
  const int rec_scattered = collective_event(before_reduce, k.r, "reduce_scatter", &scattered);
  CHECK_MSG(ready >= 0 && r_waits > ready && rec_scattered > r_waits,
            "C records grads-ready(u), R waits it, then reduce-scatters");
  const int before_wait = fake_log_count();
  CHECK_OK(unit_reduce_wait(&k.u));
  int replicated = 0;
  const int rec_replicated = collective_event(before_wait, k.r, "all_reduce", &replicated);
  CHECK_MSG(rec_replicated >= 0, "the replicate all-reduce is ordered on R");
  CHECK_MSG(fake_log_find(before_wait, FAKE_NOTE, k.r, 0, "all_gather") < 0,
            "stage 3 does not gather the gradients back");
  const int reduced = fake_log_find(rec_replicated + 1, FAKE_RECORD, k.r, 0, NULL);
  CHECK_MSG(reduced > rec_replicated && waits_after(reduced, k.c) > reduced,
            "R records reduced(u) after the replicate all-reduce; C waits it");
  check_bracketed(waits_after(reduced, k.c), k.c, "reduced(u)");
  CHECK_MSG(is_timed(nearest_record(fake_log_find(before_wait, FAKE_NOTE, k.r, 0, NULL), k.c, -1)),
            "the pair of reduced(u) opens before R's work that C waits for");
  CHECK(k.u.grads == NULL);
  unit_release(&k.u);
  CHECK_EQ_INT(k.streams.pool.count, 2); /* the params (after C) and the gradients (after R) */

  /* The host's one wait: the watchdog drains the three collectives ordered on streams. The
   * pool keeps both buffers for the next step. */
  fake_complete_all();
  CHECK_OK(unit_streams_step_end(&k.streams));
  CHECK_EQ_INT(k.streams.pool.count, 2);
  check_exposed(&k.streams, 3); /* two gathered(u), one reduced(u) */
  rig_close(&k);
  CHECK_EQ_INT(live_blocks(), blocks);
}

/* One stage-3 step of the rig's unit: forward gather and release, backward gather, gradients,
 * reduction, release, the host's wait. */
static void run_step(rig *k) {
  CHECK_OK(unit_gather_start(&k->u));
  CHECK_OK(unit_gather_wait(&k->u));
  unit_release(&k->u);
  CHECK_OK(unit_gather_wait(&k->u));
  CHECK_OK(unit_grads_begin(&k->u));
  CHECK_OK(unit_reduce_start(&k->u));
  CHECK_OK(unit_reduce_wait(&k->u));
  unit_release(&k->u);
  fake_complete_all();
  CHECK_OK(unit_streams_step_end(&k->streams));
}

/* The pool keeps what a step handed back: the second step allocates nothing (on a GPU an
 * allocation inside the step synchronises the device), its gathers wait for the kept buffers'
 * last readers instead, and what stays allocated between steps is the first step's most buffers
 * in use at once (the parameters and the gradients), which the planner predicts. */
static void test_second_step_allocates_nothing(void) {
  const uint64_t blocks = live_blocks();
  rig k;
  rig_open(&k, 3);
  mem_stats before, first, second;
  mem_stats_get(&before);
  run_step(&k);
  mem_stats_get(&first);
  const long allocated = k.streams.pool.allocations;
  CHECK_EQ_INT(allocated, 2);
  const uint64_t unit_bytes = (uint64_t)k.u.layout.numel * sizeof(float);
  CHECK_EQ_INT(first.current[MEM_GATHERED] - before.current[MEM_GATHERED], 2 * unit_bytes);

  fake_log_clear();
  run_step(&k);
  mem_stats_get(&second);
  CHECK_EQ_INT(k.streams.pool.allocations, allocated);
  CHECK_EQ_INT(second.live_blocks, first.live_blocks);
  CHECK_EQ_INT(second.current[MEM_GATHERED], first.current[MEM_GATHERED]);
  CHECK_EQ_INT(second.peak[MEM_GATHERED], first.peak[MEM_GATHERED]);
  const int gather = fake_log_find(0, FAKE_NOTE, k.g, 0, "all_gather");
  CHECK_MSG(gather > 0 && fake_log_find(0, FAKE_WAIT, k.g, 0, NULL) < gather,
            "the second step's first gather waits for its kept buffer's last readers");
  rig_close(&k);
  CHECK_EQ_INT(live_blocks(), blocks);
}

/* The backward's hand-off from one unit to the next (earlier: the unit whose backward ended
 * first): C waits for reduced(earlier), recorded on R before the next unit's reduce-scatter
 * joins R, so C never waits for the reduction just started; the earlier unit's gradients go back
 * to the pool before it. */
static void test_handoff(void) {
  rig k;
  rig_open(&k, 3);
  unit next;
  rig_unit(&k, &next, "next", 3);
  CHECK_OK(unit_grads_begin(&k.u));
  CHECK_OK(unit_reduce_handoff(&k.u, NULL));
  CHECK_OK(unit_grads_begin(&next));
  fake_log_clear();
  CHECK_OK(unit_reduce_handoff(&next, &k.u));
  const int c_waits = fake_log_find(0, FAKE_WAIT, k.c, 0, NULL);
  const int reduced =
      c_waits < 0 ? -1 : fake_log_find(0, FAKE_RECORD, k.r, fake_log_at(c_waits)->event, NULL);
  const int scatter = fake_log_find(0, FAKE_NOTE, k.r, 0, "reduce_scatter");
  CHECK_MSG(reduced >= 0 && scatter > reduced,
            "C waits reduced(earlier), recorded on R before the next unit's reduce-scatter");
  CHECK(k.u.grads == NULL && next.grads != NULL);
  CHECK_OK(unit_reduce_wait(&next));
  fake_complete_all();
  CHECK_OK(unit_streams_step_end(&k.streams));
  unit_free(&next);
  rig_close(&k);
}

static void test_stage0(void) {
  rig k;
  rig_open(&k, 0);
  fake_log_clear();
  CHECK_OK(unit_gather_wait(&k.u));
  CHECK_MSG(fake_log_find(0, FAKE_NOTE, k.g, 0, NULL) < 0, "stage 0 keeps its params");
  CHECK_OK(unit_grads_begin(&k.u));
  CHECK_OK(unit_reduce_start(&k.u));
  CHECK_OK(unit_reduce_wait(&k.u));
  int e = 0;
  const int scatter = collective_event(0, k.r, "reduce_scatter", &e);
  const int replicate = collective_event(0, k.r, "all_reduce", &e);
  const int gather_back = collective_event(0, k.r, "all_gather", &e);
  CHECK_MSG(scatter >= 0 && replicate > scatter && gather_back > replicate,
            "stage 0: reduce-scatter, replicate all-reduce, all-gather back, all on R");
  CHECK(k.u.grads != NULL); /* resident */
  const int reduced = fake_log_find(gather_back + 1, FAKE_RECORD, k.r, 0, NULL);
  check_bracketed(waits_after(reduced, k.c), k.c, "stage 0 reduced(u)");
  fake_complete_all();
  CHECK_OK(unit_streams_step_end(&k.streams));
  check_exposed(&k.streams, 1); /* the resident parameters are never waited for */
  rig_close(&k);
}

/* Stage 1 publishes after the optimizer: G waits C's reads, all-gathers, C waits for it. */
static void test_publish(void) {
  rig k;
  rig_open(&k, 1);
  fake_log_clear();
  CHECK_OK(unit_publish(&k.u));
  const int read = fake_log_find(0, FAKE_RECORD, k.c, 0, NULL);
  const int g_waits = waits_after(read, k.g);
  int published = 0;
  const int rec = collective_event(0, k.g, "all_gather", &published);
  CHECK_MSG(read >= 0 && g_waits > read && rec > g_waits,
            "C records its reads, G waits them, then all-gathers");
  CHECK_MSG(waits_after(rec, k.c) > rec, "C waits published(u)");
  check_bracketed(waits_after(rec, k.c), k.c, "published(u)");
  fake_complete_all();
  CHECK_OK(unit_streams_step_end(&k.streams));
  check_exposed(&k.streams, 1);
  rig_close(&k);
}

/* Pairs recorded before a discard (an evaluation's waits, before a step) are not summed. */
static void test_discard(void) {
  rig k;
  rig_open(&k, 1);
  CHECK_OK(unit_publish(&k.u));
  comm_exposure_discard(&k.streams.exposure);
  fake_complete_all();
  CHECK_OK(unit_streams_step_end(&k.streams));
  CHECK(k.streams.comm_exposed_ms == 0.0);
  rig_close(&k);
}

/* A stage-3 unit's life on the fake device, as test_stage3 runs it; the first error returns. */
static st_status life(void) {
  const st_device dev = fake_device();
  st_stream compute = {0};
  comm *shard = NULL, *replicate = NULL;
  unit_streams streams;
  unit u;
  memset(&streams, 0, sizeof streams);
  memset(&u, 0, sizeof u);
  st_status status;
  ST_CHECK_GOTO(stream_create(&dev, &compute), status, done);
  ST_CHECK_GOTO(fake_comm_create(&shard, &dev, "shard"), status, done);
  ST_CHECK_GOTO(fake_comm_create(&replicate, &dev, "replicate"), status, done);
  const unit_groups groups = {shard, replicate};
  ST_CHECK_GOTO(unit_streams_create(&streams, &dev, &compute, &groups), status, done);
  ST_CHECK_GOTO(unit_init(&u, "u", &dev, 3, NULL, &groups, 1, 0), status, done);
  ST_CHECK_GOTO(unit_share_streams(&u, &streams), status, done);
  const int64_t shape[2] = {8, 8};
  ST_CHECK_GOTO(unit_declare(&u, "w", 2, shape, TP_REPLICATED, 1, NULL), status, done);
  ST_CHECK_GOTO(unit_allocate(&u), status, done);
  ST_CHECK_GOTO(unit_gather_wait(&u), status, done);
  unit_release(&u);
  ST_CHECK_GOTO(unit_gather_wait(&u), status, done);
  ST_CHECK_GOTO(unit_grads_begin(&u), status, done);
  ST_CHECK_GOTO(unit_reduce_start(&u), status, done);
  ST_CHECK_GOTO(unit_reduce_wait(&u), status, done);
  unit_release(&u);
  fake_complete_all();
  status = unit_streams_step_end(&streams);
done:
  fake_complete_all();
  unit_free(&u);
  unit_streams_destroy(&streams);
  comm_destroy(replicate);
  comm_destroy(shard);
  stream_destroy(&compute);
  return status;
}

/* Every allocation of that life fails in turn (the pool's bookkeeping included, since the fake
 * device's events stay incomplete and buffers are kept): each run ends in ST_ERR_OOM, or goes
 * on where the pool frees a buffer it cannot keep, and leaves no block allocated. */
static void test_out_of_memory(void) {
  const uint64_t blocks = live_blocks();
  int failed = 0;
  for (long n = 1; n <= 120; n++) {
    mem_fail_nth(n);
    const st_status status = life();
    mem_fail_nth(0);
    CHECK_MSG(status == ST_OK || status == ST_ERR_OOM, "allocation %ld: %s (%s)", n,
              st_status_string(status), st_last_error());
    failed += status == ST_ERR_OOM;
    CHECK_MSG(live_blocks() == blocks, "allocation %ld failed: %llu blocks leaked", n,
              (unsigned long long)(live_blocks() - blocks));
  }
  CHECK_MSG(failed >= 10, "only %d allocations failed the life", failed);
  CHECK_OK(life());
}

int main(void) {
  test_stage3();
  test_second_step_allocates_nothing();
  test_handoff();
  test_stage0();
  test_publish();
  test_discard();
  test_out_of_memory();
  if (test_checks_failed()) fake_log_print();
  return test_finish("unit_streams_test");
}
