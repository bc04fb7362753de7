/* comm_exposure.h - how long a compute stream stood waiting on communication: the exposed
 * communication of a step, the part that overlap did not hide.
 *
 * Every place the compute stream is made to wait for a collective (a stream wait on its
 * completion, or on the host where the collective completes there) is bracketed by a pair of
 * timed events recorded on that stream: comm_exposure_begin just before the wait,
 * comm_exposure_end just after. The time between the two is what the stream spent waiting (on
 * a GPU the wait costs nothing when the collective finished first; on the CPU, where the
 * collectives complete on the host, it is the time the blocking calls took). The pairs are
 * read only after the host has synchronised the stream, once per step (comm_exposure_collect):
 * never a host wait of its own.
 *
 * The events are a pool reused from step to step: it grows (doubling) while a step records more
 * pairs than it holds, so after the first step a step creates no event and allocates nothing.
 * It must not be used from two threads. */
#ifndef ST_SHARDING_COMM_EXPOSURE_H
#define ST_SHARDING_COMM_EXPOSURE_H

#include "core/device.h"
#include "sharding/comm.h"

typedef struct comm_exposure {
  const st_device *dev;
  const st_stream *stream; /* the compute stream (not owned) */
  st_event *events;        /* 2 * capacity timed events: the begin and end of each pair */
  int capacity;            /* pairs the pool holds */
  int used;                /* pairs recorded since the last collect or discard */
  int open;                /* 1 between a begin and its end */
} comm_exposure;

/* An empty pool over `stream` of `dev`; creates nothing yet. */
void comm_exposure_init(comm_exposure *x, const st_device *dev, const st_stream *stream);
/* Destroys the pool's events; accepts a zeroed or already destroyed one. */
void comm_exposure_destroy(comm_exposure *x);

/* Records the start of a wait on the stream (growing the pool when it is full). */
st_status comm_exposure_begin(comm_exposure *x);
/* Records the end of the wait begun last. */
st_status comm_exposure_end(comm_exposure *x);

/* The stream waits for a started collective (comm_order_after), bracketed by a pair unless the
 * collective's group has one rank: a copy, no communication, so a run on one rank reports 0. */
st_status comm_exposure_order_after(comm_exposure *x, comm_work *work);

/* After the host has synchronised the stream: the sum of the recorded pairs' times in
 * milliseconds (0 exactly when none was recorded) into *ms, and the pool emptied for the next
 * step. */
st_status comm_exposure_collect(comm_exposure *x, double *ms);

/* Forgets the pairs recorded so far (those of work that is not part of the step measured next,
 * e.g. an evaluation's forward); the events are reused. */
void comm_exposure_discard(comm_exposure *x);

#endif /* ST_SHARDING_COMM_EXPOSURE_H */
