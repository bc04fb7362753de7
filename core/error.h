/* error.h - status codes, the thread-local error detail, and the checking macros.
 *
 * A failing function calls st_error(status, fmt, ...) once, where the problem is understood,
 * and returns its result; callers propagate with ST_CHECK / ST_CHECK_GOTO. The first macro
 * that sees a fresh error logs its file:line at debug level, so a trace is available with
 * ST_LOG_LEVEL=debug without printing the same failure at every level of the stack.
 */
#ifndef ST_CORE_ERROR_H
#define ST_CORE_ERROR_H

#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records a printf-style detail for this thread and returns status, so that
 * `return st_error(ST_ERR_INVALID_ARG, "tp %d does not divide %d heads", t, h);` reads well.
 * The arguments may include st_last_error(), to put context in front of a callee's detail. */
st_status st_error(st_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears this thread's detail (used by tests and by callers that handled an error). */
void st_error_clear(void);

/* A failure its caller handles (a fallback) inside a call of the public API must not replace
 * the program's last error, which st_last_error keeps until the next failing call: the detail
 * is saved before the attempt and put back after it. */
enum { ST_ERROR_DETAIL_BYTES = 1024 };
typedef struct st_error_saved {
  char detail[ST_ERROR_DETAIL_BYTES];
} st_error_saved;
void st_error_save(st_error_saved *out);
void st_error_restore(const st_error_saved *saved);

/* Called by the check macros: logs the propagation site once per fresh error. */
void st_error_trace(st_status status, const char *expr, const char *file, int line);

#define ST_CHECK(expr)                                             \
  do {                                                             \
    st_status st_check_status_ = (expr);                           \
    if (st_check_status_ != ST_OK) {                               \
      st_error_trace(st_check_status_, #expr, __FILE__, __LINE__); \
      return st_check_status_;                                     \
    }                                                              \
  } while (0)

/* Stores the status in `status_var` and jumps to `label` on failure. */
#define ST_CHECK_GOTO(expr, status_var, label)                 \
  do {                                                         \
    (status_var) = (expr);                                     \
    if ((status_var) != ST_OK) {                               \
      st_error_trace((status_var), #expr, __FILE__, __LINE__); \
      goto label;                                              \
    }                                                          \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_ERROR_H */
