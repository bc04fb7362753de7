/* alloc_test.c - proves the tracking allocator of core/alloc.h keeps exact books: current and
 * peak bytes per category and in total, mem_reset_peak, 64-byte alignment, free(NULL), bad
 * arguments refused, unknown and double frees refused without harm; a randomized stress
 * against a shadow model (thousands of blocks, random sizes and free order, every block's
 * contents verified at free) exercises the hash table's growth and backward-shift deletion;
 * concurrent threads keep the books exact; and failure injection: whichever of a caller's K
 * allocations fails, it sees ST_ERR_OOM, its cleanup path leaves nothing allocated, and
 * mem_fail_nth(0) turns the hook off. */
#include "core/alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "tests/testing.h"

static uint64_t rng_next(uint64_t *state) { /* splitmix64: fixed, so failures reproduce */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The bookkeeping the allocator should report, maintained independently. */
typedef struct shadow {
  uint64_t current[MEM_CATEGORY_COUNT];
  uint64_t peak[MEM_CATEGORY_COUNT];
  uint64_t total_current;
  uint64_t total_peak;
  uint64_t live_blocks;
} shadow;

static void shadow_alloc(shadow *s, mem_category cat, size_t bytes) {
  s->current[cat] += bytes;
  if (s->current[cat] > s->peak[cat]) s->peak[cat] = s->current[cat];
  s->total_current += bytes;
  if (s->total_current > s->total_peak) s->total_peak = s->total_current;
  s->live_blocks++;
}

static void shadow_free(shadow *s, mem_category cat, size_t bytes) {
  s->current[cat] -= bytes;
  s->total_current -= bytes;
  s->live_blocks--;
}

static void shadow_reset_peak(shadow *s) {
  memcpy(s->peak, s->current, sizeof s->peak);
  s->total_peak = s->total_current;
}

/* 1 when the allocator's stats equal the shadow; otherwise prints the first difference. */
static int stats_match(const shadow *want, const char *where) {
  mem_stats got;
  mem_stats_get(&got);
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    if (got.current[c] != want->current[c] || got.peak[c] != want->peak[c]) {
      fprintf(stderr, "  %s: %s current %llu peak %llu, expected %llu and %llu\n", where,
              mem_category_name((mem_category)c), (unsigned long long)got.current[c],
              (unsigned long long)got.peak[c], (unsigned long long)want->current[c],
              (unsigned long long)want->peak[c]);
      return 0;
    }
  }
  if (got.total_current != want->total_current || got.total_peak != want->total_peak ||
      got.live_blocks != want->live_blocks) {
    fprintf(stderr, "  %s: total %llu peak %llu live %llu, expected %llu, %llu and %llu\n", where,
            (unsigned long long)got.total_current, (unsigned long long)got.total_peak,
            (unsigned long long)got.live_blocks, (unsigned long long)want->total_current,
            (unsigned long long)want->total_peak, (unsigned long long)want->live_blocks);
    return 0;
  }
  return 1;
}

/* The shadow of the allocator as it is now, with peaks reset (start of a measured region). */
static shadow shadow_of_now(void) {
  mem_reset_peak();
  mem_stats now;
  mem_stats_get(&now);
  shadow s = {.total_current = now.total_current, .live_blocks = now.live_blocks};
  memcpy(s.current, now.current, sizeof s.current);
  shadow_reset_peak(&s);
  return s;
}

static int nothing_live(void) {
  mem_stats now;
  mem_stats_get(&now);
  return now.live_blocks == 0 && now.total_current == 0;
}

static uint8_t pattern_byte(uint32_t seed, size_t i) {
  return (uint8_t)((seed * 2654435761u + (uint32_t)i * 40503u) >> 13);
}

static void fill_pattern(void *p, size_t bytes, uint32_t seed) {
  for (size_t i = 0; i < bytes; i++) ((uint8_t *)p)[i] = pattern_byte(seed, i);
}

static int pattern_intact(const void *p, size_t bytes, uint32_t seed) {
  for (size_t i = 0; i < bytes; i++) {
    if (((const uint8_t *)p)[i] != pattern_byte(seed, i)) return 0;
  }
  return 1;
}

/* Before the first allocation the table does not exist yet; a free must still be harmless. */
static void test_unknown_free_before_any_allocation(void) {
  int not_allocated = 0;
  st_error_clear();
  mem_free(&not_allocated);
  CHECK(st_last_error()[0] != '\0');
  CHECK(nothing_live());
}

static void test_accounting(void) {
  CHECK(nothing_live());
  shadow want = shadow_of_now();
  const st_device cpu = device_cpu();
  void *a, *b, *c;
  CHECK_OK(mem_alloc(&a, 100, MEM_HOST, MEM_PARAMS, NULL));
  shadow_alloc(&want, MEM_PARAMS, 100);
  CHECK_OK(mem_alloc(&b, 200, MEM_PINNED, MEM_GRADS, &cpu));
  shadow_alloc(&want, MEM_GRADS, 200);
  CHECK_OK(mem_alloc(&c, 300, MEM_DEVICE, MEM_PARAMS, &cpu));
  shadow_alloc(&want, MEM_PARAMS, 300);
  CHECK(stats_match(&want, "three blocks"));
  CHECK((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0 && (uintptr_t)c % 64 == 0);

  mem_free(c);
  shadow_free(&want, MEM_PARAMS, 300);
  CHECK(stats_match(&want, "peak survives a free"));

  mem_reset_peak();
  shadow_reset_peak(&want);
  CHECK(stats_match(&want, "after mem_reset_peak"));

  void *d;
  CHECK_OK(mem_alloc(&d, 50, MEM_HOST, MEM_OPTIMIZER, NULL));
  shadow_alloc(&want, MEM_OPTIMIZER, 50);
  CHECK(stats_match(&want, "a new peak after the reset"));

  /* A zero-byte block is a real, distinct, freeable block of zero bytes. */
  void *empty;
  CHECK_OK(mem_alloc(&empty, 0, MEM_HOST, MEM_WORKSPACE, NULL));
  CHECK(empty != NULL);
  shadow_alloc(&want, MEM_WORKSPACE, 0);
  CHECK(stats_match(&want, "a zero-byte block"));

  mem_free(NULL);
  CHECK(stats_match(&want, "mem_free(NULL)"));

  mem_free(empty);
  shadow_free(&want, MEM_WORKSPACE, 0);
  mem_free(d);
  shadow_free(&want, MEM_OPTIMIZER, 50);
  mem_free(b);
  shadow_free(&want, MEM_GRADS, 200);
  mem_free(a);
  shadow_free(&want, MEM_PARAMS, 100);
  CHECK(stats_match(&want, "everything freed"));
  CHECK(nothing_live());
}

static void test_zeroed(void) {
  /* Dirty a block first, so the zeroed one is likely to reuse non-zero memory. */
  void *dirty;
  CHECK_OK(mem_alloc(&dirty, 4096, MEM_HOST, MEM_WORKSPACE, NULL));
  memset(dirty, 0xab, 4096);
  mem_free(dirty);
  void *z;
  CHECK_OK(mem_alloc_zeroed(&z, 4096, MEM_HOST, MEM_WORKSPACE, NULL));
  size_t nonzero = 0;
  for (size_t i = 0; i < 4096; i++) nonzero += ((uint8_t *)z)[i] != 0;
  CHECK_EQ_INT(nonzero, 0);
  mem_free(z);
  CHECK(nothing_live());
}

static void test_bad_arguments(void) {
  const st_device cpu = device_cpu();
  void *p = &p;
  CHECK_STATUS(mem_alloc(&p, 16, MEM_HOST, MEM_CATEGORY_COUNT, NULL), ST_ERR_INVALID_ARG);
  CHECK(p == NULL);
  p = &p;
  CHECK_STATUS(mem_alloc(&p, 16, MEM_HOST, (mem_category)-1, NULL), ST_ERR_INVALID_ARG);
  CHECK(p == NULL);
  p = &p;
  CHECK_STATUS(mem_alloc(&p, 16, MEM_PINNED, MEM_COMM, NULL), ST_ERR_INVALID_ARG);
  CHECK(p == NULL);
  p = &p;
  CHECK_STATUS(mem_alloc(&p, 16, MEM_DEVICE, MEM_COMM, NULL), ST_ERR_INVALID_ARG);
  CHECK(p == NULL);
  p = &p;
  CHECK_STATUS(mem_alloc(&p, 16, (mem_kind)3, MEM_COMM, &cpu), ST_ERR_INVALID_ARG);
  CHECK(p == NULL);
  CHECK(nothing_live());

  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    const char *name = mem_category_name((mem_category)c);
    CHECK_MSG(name && name[0] && strcmp(name, "invalid") != 0, "category %d is named %s", c,
              name ? name : "(null)");
  }
  CHECK(strcmp(mem_category_name(MEM_PARAMS), "params") == 0);
  CHECK(strcmp(mem_category_name(MEM_CATEGORY_COUNT), "invalid") == 0);
}

/* Addresses mem_alloc never returned (a stack variable, the inside of a block, a block already
 * freed) are refused with a detail; the books and the live block stay as they were. */
static void test_unknown_free(void) {
  shadow want = shadow_of_now();
  void *p;
  CHECK_OK(mem_alloc(&p, 256, MEM_HOST, MEM_ACTIVATIONS, NULL));
  shadow_alloc(&want, MEM_ACTIVATIONS, 256);
  fill_pattern(p, 256, 7);

  int on_stack = 0;
  st_error_clear();
  mem_free(&on_stack);
  CHECK(strstr(st_last_error(), "mem_free") != NULL);
  st_error_clear();
  mem_free((uint8_t *)p + 64);
  CHECK(strstr(st_last_error(), "mem_free") != NULL);
  CHECK(stats_match(&want, "after unknown frees"));
  CHECK(pattern_intact(p, 256, 7));

  mem_free(p);
  shadow_free(&want, MEM_ACTIVATIONS, 256);
  st_error_clear();
  mem_free(p); /* double free */
  CHECK(strstr(st_last_error(), "mem_free") != NULL);
  CHECK(stats_match(&want, "after a double free"));
  CHECK(nothing_live());
}

typedef struct live_block {
  void *ptr;
  size_t bytes;
  mem_category category;
  uint32_t seed;
} live_block;

/* The stress hovers around each target in turn. The table doubles when it would pass half
 * full, so each target sits just under a capacity's half (load near 1/2: long probe chains,
 * many of them wrapping past the end of the table, which is where backward-shift deletion is
 * easiest to get wrong), and reaching the next target grows the table through a doubling. */
enum { STRESS_OPS_PER_TARGET = 24000, STRESS_MAX_LIVE = 4096 };
static const int stress_targets[] = {120, 250, 1000, 1950, 4000, 0};

static size_t random_size(uint64_t *rng) {
  uint64_t r = rng_next(rng);
  return (r & 15) == 0 ? (size_t)((r >> 8) % 16384) : (size_t)((r >> 8) % 512);
}

/* Frees live[i] after checking its contents, keeping the array dense; updates `want` unless
 * it is NULL. Returns whether the contents were intact. */
static int stress_free(live_block *live, int *n_live, int i, shadow *want) {
  live_block b = live[i];
  int intact = pattern_intact(b.ptr, b.bytes, b.seed);
  mem_free(b.ptr);
  if (want) shadow_free(want, b.category, b.bytes);
  live[i] = live[--*n_live];
  return intact;
}

static void test_random_stress(void) {
  static live_block live[STRESS_MAX_LIVE];
  int n_live = 0;
  uint64_t rng = 12345;
  shadow want = shadow_of_now();
  long corrupted = 0, misaligned = 0, failed_allocs = 0, book_errors = 0, peak_live = 0;
  int n_targets = (int)(sizeof stress_targets / sizeof stress_targets[0]);
  for (int op = 0; op < n_targets * STRESS_OPS_PER_TARGET; op++) {
    int alloc_percent = n_live < stress_targets[op / STRESS_OPS_PER_TARGET] ? 60 : 40;
    uint64_t r = rng_next(&rng);
    int do_alloc = n_live == 0 || ((int)(r % 100) < alloc_percent && n_live < STRESS_MAX_LIVE);
    if (do_alloc) {
      live_block b = {.bytes = random_size(&rng),
                      .category = (mem_category)((r >> 8) % MEM_CATEGORY_COUNT),
                      .seed = (uint32_t)(r >> 32)};
      if (mem_alloc(&b.ptr, b.bytes, MEM_HOST, b.category, NULL) != ST_OK) {
        failed_allocs++;
        continue;
      }
      misaligned += (uintptr_t)b.ptr % 64 != 0;
      fill_pattern(b.ptr, b.bytes, b.seed);
      shadow_alloc(&want, b.category, b.bytes);
      live[n_live++] = b;
      if (n_live > peak_live) peak_live = n_live;
    } else {
      corrupted += !stress_free(live, &n_live, (int)((r >> 8) % (uint64_t)n_live), &want);
    }
    if (!stats_match(&want, "stress") && ++book_errors > 3) break;
  }
  while (n_live > 0) {
    uint64_t r = rng_next(&rng);
    corrupted += !stress_free(live, &n_live, (int)(r % (uint64_t)n_live), &want);
  }
  CHECK_EQ_INT(failed_allocs, 0);
  CHECK_EQ_INT(misaligned, 0);
  CHECK_EQ_INT(corrupted, 0);
  CHECK_EQ_INT(book_errors, 0);
  CHECK_MSG(peak_live > 3900, "the stress reached only %ld live blocks", peak_live);
  CHECK(stats_match(&want, "after the stress"));
  CHECK(nothing_live());
}

/* Each thread allocates and frees its own blocks; main checks the results after joining. */
typedef struct thread_work {
  uint64_t seed;
  long corrupted;
  long failures;
} thread_work;

static void *thread_stress(void *arg) {
  thread_work *w = arg;
  live_block live[64];
  int n_live = 0;
  for (int op = 0; op < 4000; op++) {
    uint64_t r = rng_next(&w->seed);
    if (n_live < 64 && (n_live == 0 || r % 2)) {
      live_block b = {.bytes = random_size(&w->seed),
                      .category = (mem_category)((r >> 8) % MEM_CATEGORY_COUNT),
                      .seed = (uint32_t)(r >> 32)};
      if (mem_alloc(&b.ptr, b.bytes, MEM_HOST, b.category, NULL) != ST_OK) {
        w->failures++;
        continue;
      }
      fill_pattern(b.ptr, b.bytes, b.seed);
      live[n_live++] = b;
    } else {
      w->corrupted += !stress_free(live, &n_live, (int)((r >> 8) % (uint64_t)n_live), NULL);
    }
  }
  while (n_live > 0) w->corrupted += !stress_free(live, &n_live, n_live - 1, NULL);
  return NULL;
}

static void test_threads(void) {
  enum { THREADS = 4 };
  pthread_t threads[THREADS];
  thread_work work[THREADS];
  int started = 0;
  for (int t = 0; t < THREADS; t++) {
    work[t] = (thread_work){.seed = 1000u + (uint64_t)t};
    if (!CHECK(pthread_create(&threads[t], NULL, thread_stress, &work[t]) == 0)) break;
    started++;
  }
  for (int t = 0; t < started; t++) {
    pthread_join(threads[t], NULL);
    CHECK_EQ_INT(work[t].failures, 0);
    CHECK_EQ_INT(work[t].corrupted, 0);
  }
  CHECK(nothing_live());
}

/* ---- Failure injection ---------------------------------------------------------------------- */

enum { K = 6 };

static const struct {
  size_t bytes;
  mem_kind kind;
  mem_category category;
} k_plan[K] = {
    {1000, MEM_HOST, MEM_PARAMS},      {2000, MEM_HOST, MEM_GRADS},
    {3000, MEM_PINNED, MEM_OPTIMIZER}, {4000, MEM_DEVICE, MEM_GATHERED},
    {5000, MEM_HOST, MEM_ACTIVATIONS}, {6000, MEM_PINNED, MEM_COMM},
};

/* The pattern every module follows: acquire in order, on failure release what was acquired
 * in reverse order and leave every output NULL. */
static st_status alloc_k_buffers(void *out[K]) {
  const st_device cpu = device_cpu();
  st_status status = ST_OK;
  for (int i = 0; i < K; i++) out[i] = NULL;
  for (int i = 0; i < K; i++) {
    ST_CHECK_GOTO(mem_alloc(&out[i], k_plan[i].bytes, k_plan[i].kind, k_plan[i].category, &cpu),
                  status, fail);
  }
  return ST_OK;
fail:
  for (int i = K - 1; i >= 0; i--) {
    mem_free(out[i]);
    out[i] = NULL;
  }
  return status;
}

static void free_k_buffers(void *bufs[K]) {
  for (int i = K - 1; i >= 0; i--) mem_free(bufs[i]);
}

static void test_failure_injection(void) {
  CHECK(nothing_live());
  for (int n = 1; n <= K; n++) {
    mem_reset_peak();
    mem_fail_nth(n);
    void *bufs[K];
    st_error_clear();
    CHECK_STATUS(alloc_k_buffers(bufs), ST_ERR_OOM);
    CHECK_MSG(strstr(st_last_error(), "injected") != NULL, "n=%d: detail '%s'", n, st_last_error());
    for (int i = 0; i < K; i++) CHECK_MSG(bufs[i] == NULL, "n=%d: buffer %d not NULL", n, i);
    mem_stats s;
    mem_stats_get(&s);
    CHECK_MSG(s.live_blocks == 0 && s.total_current == 0, "n=%d: %llu blocks, %llu bytes leaked", n,
              (unsigned long long)s.live_blocks, (unsigned long long)s.total_current);
    /* Exactly the n-1 allocations before the n-th succeeded (and were freed again). */
    uint64_t before = 0;
    for (int i = 0; i < n - 1; i++) before += k_plan[i].bytes;
    CHECK_MSG(s.total_peak == before, "n=%d: peak %llu, expected %llu", n,
              (unsigned long long)s.total_peak, (unsigned long long)before);

    /* The hook fires once: the same work succeeds right after. */
    CHECK_OK(alloc_k_buffers(bufs));
    free_k_buffers(bufs);
  }
  CHECK(nothing_live());

  /* Counting spans calls: the 7th allocation from now is the first of the next call. */
  void *bufs[K];
  mem_fail_nth(K + 1);
  CHECK_OK(alloc_k_buffers(bufs));
  void *next = NULL;
  CHECK_STATUS(mem_alloc_zeroed(&next, 64, MEM_HOST, MEM_WORKSPACE, NULL), ST_ERR_OOM);
  CHECK(next == NULL);
  free_k_buffers(bufs);

  /* 0 (and a negative n) turn the hook off. */
  mem_fail_nth(2);
  mem_fail_nth(0);
  CHECK_OK(alloc_k_buffers(bufs));
  free_k_buffers(bufs);
  mem_fail_nth(-3);
  CHECK_OK(alloc_k_buffers(bufs));
  free_k_buffers(bufs);
  CHECK(nothing_live());
}

int main(void) {
  test_unknown_free_before_any_allocation();
  test_accounting();
  test_zeroed();
  test_bad_arguments();
  test_unknown_free();
  test_random_stress();
  test_threads();
  test_failure_injection();
  return test_finish("alloc_test");
}
