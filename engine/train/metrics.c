/* metrics.c - step records as JSON lines. */
#include "engine/train/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

/* `"key": value` with %.9g, or null for a value JSON cannot hold (inf, nan). */
static void number(FILE *out, const char *key, double value) {
  if (isfinite(value)) {
    fprintf(out, ", \"%s\": %.9g", key, value);
  } else {
    fprintf(out, ", \"%s\": null", key);
  }
}

int metrics_write_json(FILE *out, const step_record *r) {
  fprintf(out, "{\"step\": %d", r->step);
  number(out, "loss", r->loss);
  number(out, "lr", r->lr);
  number(out, "grad_norm", r->grad_norm);
  fprintf(out, ", \"tokens\": %lld", (long long)r->tokens);
  number(out, "tokens_per_s", r->tokens_per_s);
  number(out, "step_ms", r->step_ms);
  number(out, "mfu", r->mfu);
  number(out, "comm_exposed_ms", r->comm_exposed_ms);
  fprintf(out, ", \"mem\": {");
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    fprintf(out, "%s\"%s\": %llu", c ? ", " : "", mem_category_name((mem_category)c),
            (unsigned long long)r->mem->peak[c]);
  }
  fprintf(out,
          "}, \"comm_bytes\": {\"all_gather\": %llu, \"reduce_scatter\": %llu, "
          "\"all_reduce\": %llu}, \"mesh\": [%d, %d, %d], \"zero\": %d",
          (unsigned long long)r->comm_bytes[COMM_ALL_GATHER],
          (unsigned long long)r->comm_bytes[COMM_REDUCE_SCATTER],
          (unsigned long long)r->comm_bytes[COMM_ALL_REDUCE], r->R, r->S, r->T, r->zero);
  fprintf(out, ", \"dtypes\": {\"param\": \"%s\", \"reduce\": \"%s\"}", r->param_dtype,
          r->reduce_dtype);
  number(out, "loss_scale", r->loss_scale);
  fprintf(out, ", \"skipped\": %d", r->skipped);
  if (r->has_val) number(out, "val_loss", r->val_loss);
  fputs("}\n", out);
  return fflush(out) == 0 && !ferror(out);
}

/* 1 when `path` is a regular file whose last byte is not a newline (a line cut short); 0 for an
 * empty or complete file, one this process cannot read, or a device, pipe or terminal. */
static int ends_mid_line(const char *path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  char last = '\n';
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      pread(fd, &last, 1, st.st_size - 1) != 1) {
    last = '\n';
  }
  close(fd);
  return last != '\n';
}

FILE *metrics_open_append(const char *path) {
  const int repair = ends_mid_line(path);
  FILE *f = fopen(path, "a");
  if (!f || !repair) return f;
  if (fputc('\n', f) == EOF || fflush(f) != 0) {
    const int saved = errno;
    fclose(f);
    errno = saved;
    return NULL;
  }
  return f;
}

int metrics_sync(FILE *out) {
  if (fflush(out) != 0) return 0;
  struct stat st; /* a device (/dev/null), pipe or terminal has nothing to make durable */
  return fstat(fileno(out), &st) != 0 || !S_ISREG(st.st_mode) || fsync(fileno(out)) == 0;
}
