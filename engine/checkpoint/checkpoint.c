/* checkpoint.c - the collective restore of checkpoint.h (the save is ckpt_save.c's, the
 * directories' ckpt_dirs.c's). */
#include "engine/checkpoint/checkpoint.h"

#include <stdio.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/io/job_agree.h"

static st_status verify_share(const ckpt_source *src) {
  int rank, size;
  job_world(&rank, &size);
  const ckpt_manifest *m = ckpt_source_manifest(src);
  for (int f = rank; f < m->n_files; f += size) ST_CHECK(ckpt_source_verify(src, f));
  return ST_OK;
}

/* Reads unit u's owned range of every parameter from the checkpoint, chunk by chunk. */
static st_status restore_unit(gpt_model *m, int u, ckpt_source *src, float *buf[3]) {
  unit *un = &m->units[u];
  const unit_layout *l = &un->layout;
  for (int k = 0; k < l->count; k++) {
    const unit_param *p = &l->params[k];
    int64_t lo, hi;
    unit_owned_part(un, k, &lo, &hi);
    char name[CKPT_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", m->prefixes[u], p->name);
    for (int64_t at = lo; at < hi; at += CKPT_CHUNK_ELEMENTS) {
      const int64_t n = hi - at < CKPT_CHUNK_ELEMENTS ? hi - at : CKPT_CHUNK_ELEMENTS;
      for (int st = 0; st < CKPT_STATE_COUNT; st++) {
        ST_CHECK(
            ckpt_source_read(src, (ckpt_state)st, name, p, l->T, l->t, at - p->offset, n, buf[st]));
      }
      ST_CHECK(unit_restore_owned(un, at, n, buf[0], buf[1], buf[2]));
    }
  }
  return ST_OK;
}

static st_status restore_local(gpt_model *m, ckpt_source *src) {
  float *buf[3] = {NULL, NULL, NULL};
  st_status status = ST_OK;
  for (int i = 0; i < 3 && status == ST_OK; i++) {
    status = mem_alloc((void **)&buf[i], (size_t)CKPT_CHUNK_ELEMENTS * sizeof(float), MEM_HOST,
                       MEM_WORKSPACE, NULL);
  }
  for (int u = 0; u < m->n_units && status == ST_OK; u++) status = restore_unit(m, u, src, buf);
  for (int i = 2; i >= 0; i--) mem_free(buf[i]);
  return status;
}

st_status ckpt_restore(gpt_model *m, ckpt_source *src) {
  ST_CHECK(job_agree(ckpt_source_check_model(src, &m->cfg)));
  ST_CHECK(job_agree(verify_share(src)));
  ST_CHECK(job_agree(restore_local(m, src)));
  /* Collective over each shard group (stages 1-2 gather the restored shards). */
  for (int u = 0; u < m->n_units; u++) ST_CHECK(unit_publish(&m->units[u]));
  return ST_OK;
}
