/* error.c - status names and the thread-local error detail. Owns no heap memory: the detail
 * lives in a fixed thread-local buffer, so recording an error can never fail. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"

static _Thread_local char error_detail[ST_ERROR_DETAIL_BYTES];
static _Thread_local int error_traced;

const char *st_status_string(st_status status) {
  switch (status) {
    case ST_OK: return "ST_OK";
    case ST_ERR_INVALID_ARG: return "ST_ERR_INVALID_ARG";
    case ST_ERR_OOM: return "ST_ERR_OOM";
    case ST_ERR_IO: return "ST_ERR_IO";
    case ST_ERR_FORMAT: return "ST_ERR_FORMAT";
    case ST_ERR_UNSUPPORTED: return "ST_ERR_UNSUPPORTED";
    case ST_ERR_NO_DEVICE: return "ST_ERR_NO_DEVICE";
    case ST_ERR_CUDA: return "ST_ERR_CUDA";
    case ST_ERR_NCCL: return "ST_ERR_NCCL";
    case ST_ERR_MPI: return "ST_ERR_MPI";
    case ST_ERR_TIMEOUT: return "ST_ERR_TIMEOUT";
    case ST_ERR_INTERNAL: return "ST_ERR_INTERNAL";
  }
  return "ST_ERR_UNKNOWN";
}

const char *st_last_error(void) { return error_detail; }

#define ST_STRINGIFY_(x) #x
#define ST_STRINGIFY(x) ST_STRINGIFY_(x)

const char *st_version(void) {
  return ST_STRINGIFY(ST_VERSION_MAJOR) "." ST_STRINGIFY(ST_VERSION_MINOR) "." ST_STRINGIFY(
      ST_VERSION_PATCH);
}

st_status st_error(st_status status, const char *fmt, ...) {
  char detail[sizeof error_detail]; /* the arguments may include st_last_error() itself */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  memcpy(error_detail, detail, strlen(detail) + 1);
  error_traced = 0;
  return status;
}

void st_error_clear(void) {
  error_detail[0] = '\0';
  error_traced = 0;
}

void st_error_save(st_error_saved *out) {
  memcpy(out->detail, error_detail, strlen(error_detail) + 1);
}

void st_error_restore(const st_error_saved *saved) {
  memcpy(error_detail, saved->detail, strlen(saved->detail) + 1);
  error_traced = 0;
}

void st_error_trace(st_status status, const char *expr, const char *file, int line) {
  if (error_traced) return;
  error_traced = 1;
  st_log(ST_LOG_DEBUG, "%s:%d: %s -> %s: %s", file, line, expr, st_status_string(status),
         error_detail);
}
