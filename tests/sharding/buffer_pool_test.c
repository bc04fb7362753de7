/* buffer_pool_test.c - the pool of transient buffers on the logging fake device: a buffer handed
 * back is reused only by a stream that first waits for its last readers' events, only for the
 * same size and category; the allocator's categories count what the pool keeps, until it is
 * destroyed; per size, it holds as many buffers as were ever in use at once (also on the CPU,
 * where readers are done at once); a failed allocation is ST_ERR_OOM with nothing leaked. */
#include "sharding/buffer_pool.h"

#include "core/alloc.h"
#include "tests/sharding/fake_device.h"
#include "tests/testing.h"

static uint64_t current(mem_category c) {
  mem_stats s;
  mem_stats_get(&s);
  return s.current[c];
}

static uint64_t live_blocks(void) {
  mem_stats s;
  mem_stats_get(&s);
  return s.live_blocks;
}

/* Kept until the readers' events complete, then reused only after a wait for each of them. */
static void test_reuse_after_events(void) {
  const st_device dev = fake_device();
  st_stream compute, reduce, gather;
  CHECK_OK(stream_create(&dev, &compute));
  CHECK_OK(stream_create(&dev, &reduce));
  CHECK_OK(stream_create(&dev, &gather));
  const uint64_t blocks = live_blocks(), gathered = current(MEM_GATHERED);
  buffer_pool pool;
  buffer_pool_init(&pool, &dev);

  void *a = NULL, *other = NULL;
  CHECK_OK(buffer_pool_get(&pool, 4096, MEM_GATHERED, &compute, &a));
  CHECK_EQ_INT(current(MEM_GATHERED) - gathered, 4096);
  fake_log_clear();
  const st_stream *readers[2] = {&compute, &reduce};
  buffer_pool_put(&pool, a, 4096, MEM_GATHERED, readers, 2);
  CHECK_EQ_INT(pool.count, 1); /* its readers' work is still queued: kept, still counted */
  CHECK_EQ_INT(current(MEM_GATHERED) - gathered, 4096);
  const int on_c = fake_log_find(0, FAKE_RECORD, fake_stream_id(&compute), 0, NULL);
  const int on_r = fake_log_find(0, FAKE_RECORD, fake_stream_id(&reduce), 0, NULL);
  CHECK(on_c >= 0 && on_r >= 0);

  /* Another category is not this buffer (another size: test_kept_per_size). */
  const uint64_t grads = current(MEM_GRADS);
  CHECK_OK(buffer_pool_get(&pool, 4096, MEM_GRADS, &gather, &other));
  CHECK(other != a);
  CHECK_EQ_INT(current(MEM_GRADS) - grads, 4096);
  CHECK_EQ_INT(fake_log_find(0, FAKE_WAIT, fake_stream_id(&gather), 0, NULL), -1);

  /* The same size and category: the same buffer, after G waits for both readers' events. */
  void *b = NULL;
  CHECK_OK(buffer_pool_get(&pool, 4096, MEM_GATHERED, &gather, &b));
  CHECK(b == a);
  CHECK_EQ_INT(pool.count, 0);
  if (on_c >= 0 && on_r >= 0) {
    const int g = fake_stream_id(&gather);
    CHECK(fake_log_find(on_c, FAKE_WAIT, g, fake_log_at(on_c)->event, NULL) > on_c);
    CHECK(fake_log_find(on_r, FAKE_WAIT, g, fake_log_at(on_r)->event, NULL) > on_r);
  }

  /* Handed back again, done or not, both are kept (and counted) until the pool is destroyed. */
  const st_stream *g_reader[1] = {&gather};
  buffer_pool_put(&pool, b, 4096, MEM_GATHERED, g_reader, 1);
  buffer_pool_put(&pool, other, 4096, MEM_GRADS, g_reader, 1);
  fake_complete_all();
  CHECK_EQ_INT(pool.count, 2);
  CHECK_EQ_INT(current(MEM_GATHERED) - gathered, 4096);
  CHECK_EQ_INT(pool.allocations, 2);
  buffer_pool_destroy(&pool);
  CHECK_EQ_INT(live_blocks(), blocks);
  CHECK_EQ_INT(current(MEM_GATHERED), gathered);
  CHECK_EQ_INT(current(MEM_GRADS), grads);
  stream_destroy(&gather);
  stream_destroy(&reduce);
  stream_destroy(&compute);
}

/* On the CPU (every event complete when recorded) a buffer handed back is kept as well, and the
 * pool holds, per size, as many buffers as were ever in use at once: a get allocates only when
 * every buffer of its size is in use, and nothing is freed before destroy. */
static void test_kept_per_size(void) {
  const st_device dev = device_cpu();
  st_stream c;
  CHECK_OK(stream_create(&dev, &c));
  buffer_pool pool;
  buffer_pool_init(&pool, &dev);
  const uint64_t base = current(MEM_GRADS);
  const st_stream *readers[1] = {&c};
  void *x = NULL, *y = NULL, *z = NULL, *again = NULL;
  CHECK_OK(buffer_pool_get(&pool, 1000, MEM_GRADS, &c, &x));
  CHECK_OK(buffer_pool_get(&pool, 1000, MEM_GRADS, &c, &y));
  buffer_pool_put(&pool, x, 1000, MEM_GRADS, readers, 1);
  buffer_pool_put(&pool, y, 1000, MEM_GRADS, readers, 1);
  CHECK_EQ_INT(current(MEM_GRADS) - base, 2000); /* kept, still counted */
  CHECK_OK(buffer_pool_get(&pool, 1000, MEM_GRADS, &c, &again));
  CHECK(again == x || again == y);
  CHECK_EQ_INT(pool.allocations, 2);

  /* Another size is a new buffer; the kept 1000 stays for its own size. */
  CHECK_OK(buffer_pool_get(&pool, 1500, MEM_GRADS, &c, &z));
  CHECK_EQ_INT(current(MEM_GRADS) - base, 3500);
  CHECK_EQ_INT(pool.allocations, 3);
  void *other = NULL;
  CHECK_OK(buffer_pool_get(&pool, 1000, MEM_GRADS, &c, &other));
  CHECK(other != again && (other == x || other == y));
  CHECK_EQ_INT(pool.allocations, 3);
  buffer_pool_put(&pool, again, 1000, MEM_GRADS, readers, 1);
  buffer_pool_put(&pool, other, 1000, MEM_GRADS, readers, 1);
  buffer_pool_put(&pool, z, 1500, MEM_GRADS, readers, 1);
  buffer_pool_put(&pool, NULL, 1000, MEM_GRADS, readers, 1); /* accepted */
  CHECK_EQ_INT(pool.count, 3);
  CHECK_EQ_INT(current(MEM_GRADS) - base, 3500);
  buffer_pool_destroy(&pool);
  CHECK_EQ_INT(current(MEM_GRADS), base);
  stream_destroy(&c);
}

/* A failed allocation comes back as ST_ERR_OOM, with nothing allocated or kept; a hand-back
 * allocates nothing. */
static void test_oom(void) {
  const st_device dev = fake_device();
  st_stream c;
  CHECK_OK(stream_create(&dev, &c));
  buffer_pool pool;
  buffer_pool_init(&pool, &dev);
  const uint64_t blocks = live_blocks();
  void *p = (void *)&pool;
  mem_fail_nth(1);
  CHECK_STATUS(buffer_pool_get(&pool, 4096, MEM_GATHERED, &c, &p), ST_ERR_OOM);
  CHECK(p == NULL);
  CHECK_EQ_INT(live_blocks(), blocks);
  mem_fail_nth(0);
  /* More buffers than the table's first room, all handed back with an allocation failure
   * armed: get made the room, so put allocates nothing and keeps every one (a put that had to
   * grow the table freed the buffer instead, swallowing the failure). */
  enum { MANY = 9 };
  void *many[MANY];
  for (int i = 0; i < MANY; i++) CHECK_OK(buffer_pool_get(&pool, 4096, MEM_GATHERED, &c, &many[i]));
  const st_stream *readers[1] = {&c};
  mem_fail_nth(1);
  for (int i = 0; i < MANY; i++) buffer_pool_put(&pool, many[i], 4096, MEM_GATHERED, readers, 1);
  CHECK(mem_fail_pending());
  mem_fail_nth(0);
  CHECK_EQ_INT(pool.count, MANY);
  buffer_pool_destroy(&pool);
  CHECK_EQ_INT(live_blocks(), blocks);
  stream_destroy(&c);
}

int main(void) {
  test_reuse_after_events();
  test_kept_per_size();
  test_oom();
  return test_finish("buffer_pool_test");
}
