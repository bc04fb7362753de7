/* fake_device.h - a device backend for tests of stream ordering. Memory is host memory and
 * copies and fills run at once, as on the CPU; but streams and events are numbered objects,
 * every event record and stream wait (and every note a fake collective adds) goes into one
 * log in call order, and an event completes only when the test says so. Timed events
 * (event_create_timed) are logged as such, and any two completed ones are 1 ms apart
 * (FAKE_ELAPSED_MS), so a sum of intervals counts them. */
#ifndef ST_TESTS_SHARDING_FAKE_DEVICE_H
#define ST_TESTS_SHARDING_FAKE_DEVICE_H

#include "core/device.h"

typedef enum fake_kind {
  FAKE_RECORD = 0, /* event recorded on stream (what: "timed" for a timed event, else NULL) */
  FAKE_WAIT = 1,   /* stream waits for event */
  FAKE_NOTE = 2    /* a collective enqueued on stream (what names it) */
} fake_kind;

typedef struct fake_entry {
  fake_kind kind;
  int stream, event; /* ids; event 0 for a note */
  const char *what;
} fake_entry;

/* What event_elapsed_ms says of any two completed timed events. */
#define FAKE_ELAPSED_MS 1.0

st_device fake_device(void);

int fake_stream_id(const st_stream *stream);
int fake_event_id(const st_event *event);

void fake_log_clear(void);
int fake_log_count(void);
const fake_entry *fake_log_at(int i);
/* Index of the first entry at or after `from` that matches (event 0 or what NULL: any), or -1. */
int fake_log_find(int from, fake_kind kind, int stream, int event, const char *what);
void fake_log_note(const st_stream *stream, const char *what);
/* Prints the log (for a failing test). */
void fake_log_print(void);

/* Every event recorded so far completes. */
void fake_complete_all(void);

#endif /* ST_TESTS_SHARDING_FAKE_DEVICE_H */
