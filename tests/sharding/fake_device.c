/* fake_device.c - the logging device backend of fake_device.h. Single-threaded, test only. */
#include "tests/sharding/fake_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define FAKE_LOG_MAX 4096

typedef struct fake_stream {
  int id;
} fake_stream;

typedef struct fake_event {
  int id;
  int timed;
  int recorded, done;
  struct fake_event *next; /* every live event, for fake_complete_all */
} fake_event;

static fake_entry log_entries[FAKE_LOG_MAX];
static int log_count;
static int next_stream_id = 1, next_event_id = 1;
static fake_event *live_events;

static void append(fake_kind kind, int stream, int event, const char *what) {
  if (log_count < FAKE_LOG_MAX) log_entries[log_count++] = (fake_entry){kind, stream, event, what};
}

static st_status fake_alloc(mem_kind kind, size_t bytes, void **out) {
  (void)kind;
  return host_raw_alloc(bytes, out);
}

static void fake_free(mem_kind kind, void *ptr) {
  (void)kind;
  free(ptr);
}

static st_status fake_stream_create(void **out) {
  fake_stream *s = malloc(sizeof *s);
  if (!s) return ST_ERR_OOM;
  s->id = next_stream_id++;
  *out = s;
  return ST_OK;
}

static void fake_stream_destroy(void *stream) { free(stream); }

static st_status fake_stream_sync(void *stream) {
  (void)stream;
  return ST_OK;
}

static st_status fake_memcpy(void *dst, const void *src, size_t bytes, void *stream) {
  (void)stream;
  if (bytes) memmove(dst, src, bytes);
  return ST_OK;
}

static st_status fake_memset(void *dst, int value, size_t bytes, void *stream) {
  (void)stream;
  if (bytes) memset(dst, value, bytes);
  return ST_OK;
}

static st_status fake_event_create(void **out) {
  fake_event *e = calloc(1, sizeof *e);
  if (!e) return ST_ERR_OOM;
  e->id = next_event_id++;
  e->next = live_events;
  live_events = e;
  *out = e;
  return ST_OK;
}

static st_status fake_timed_event_create(void **out) {
  ST_CHECK(fake_event_create(out));
  ((fake_event *)*out)->timed = 1;
  return ST_OK;
}

/* As CUDA, only two completed timed events can be timed. */
static st_status fake_event_elapsed_ms(void *start, void *end, double *ms) {
  const fake_event *a = start, *b = end;
  if (!a->timed || !b->timed || !a->recorded || !b->recorded || !a->done || !b->done) {
    return st_error(ST_ERR_INVALID_ARG, "fake events %d and %d cannot be timed", a->id, b->id);
  }
  *ms = FAKE_ELAPSED_MS;
  return ST_OK;
}

static void fake_event_destroy(void *event) {
  for (fake_event **at = &live_events; *at; at = &(*at)->next) {
    if (*at == event) {
      *at = (*at)->next;
      break;
    }
  }
  free(event);
}

static st_status fake_event_record(void *event, void *stream) {
  fake_event *e = event;
  e->recorded = 1;
  e->done = 0;
  append(FAKE_RECORD, ((fake_stream *)stream)->id, e->id, e->timed ? "timed" : NULL);
  return ST_OK;
}

static st_status fake_stream_wait_event(void *stream, void *event) {
  append(FAKE_WAIT, ((fake_stream *)stream)->id, ((fake_event *)event)->id, NULL);
  return ST_OK;
}

/* An event never recorded is complete, as in CUDA. */
static st_status fake_event_query(void *event, int *done) {
  const fake_event *e = event;
  *done = !e->recorded || e->done;
  return ST_OK;
}

static const device_backend fake_backend = {
    .name = "fake",
    .kind = ST_DEVICE_CPU,
    .raw_alloc = fake_alloc,
    .raw_free = fake_free,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_sync = fake_stream_sync,
    .memcpy_async = fake_memcpy,
    .memset_async = fake_memset,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .stream_wait_event = fake_stream_wait_event,
    .event_query = fake_event_query,
    .timed_event_create = fake_timed_event_create,
    .event_elapsed_ms = fake_event_elapsed_ms,
    .device_memory_is_host = 1,
};

st_device fake_device(void) { return (st_device){.backend = &fake_backend, .ordinal = 0}; }

int fake_stream_id(const st_stream *stream) { return ((const fake_stream *)stream->handle)->id; }
int fake_event_id(const st_event *event) { return ((const fake_event *)event->handle)->id; }

void fake_log_clear(void) { log_count = 0; }
int fake_log_count(void) { return log_count; }
const fake_entry *fake_log_at(int i) { return &log_entries[i]; }

int fake_log_find(int from, fake_kind kind, int stream, int event, const char *what) {
  for (int i = from < 0 ? 0 : from; i < log_count; i++) {
    const fake_entry *e = &log_entries[i];
    if (e->kind != kind || e->stream != stream) continue;
    if (event && e->event != event) continue;
    if (what && (!e->what || strcmp(e->what, what) != 0)) continue;
    return i;
  }
  return -1;
}

void fake_log_note(const st_stream *stream, const char *what) {
  append(FAKE_NOTE, fake_stream_id(stream), 0, what);
}

void fake_log_print(void) {
  static const char *const kinds[3] = {"record", "wait", "note"};
  for (int i = 0; i < log_count; i++) {
    const fake_entry *e = &log_entries[i];
    printf("  %3d %-6s s%d e%d %s\n", i, kinds[e->kind], e->stream, e->event,
           e->what ? e->what : "");
  }
}

void fake_complete_all(void) {
  for (fake_event *e = live_events; e; e = e->next) e->done = 1;
}
