/* cmd_ckpt.c - the offline checkpoint commands, each on one process (no mpirun needed):
 *   shardtrain reshard SRC DST --dp-replicate R --dp-shard S --tp T [--zero Z]
 *   shardtrain export CKPT OUT.safetensors
 *   shardtrain inspect CKPT
 * Paths come first, then flags. Bad input exits 2 with one error line (an output path that
 * cannot be written or that lies in the checkpoint read, and a CKPT that is not a step directory,
 * included, checked before any work); a damaged checkpoint exits 1. reshard creates DST's parent
 * when it is missing, as train creates --ckpt-dir. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/checkpoint/ckpt_offline.h"
#include "engine/cli/commands.h"
#include "engine/flags/cli_flags.h"
#include "engine/train/output_paths.h"

/* argv[2 .. 2 + n): the command's paths, which must all be there before any flag. */
static st_status positionals(int argc, char **argv, int n, const char *what) {
  for (int i = 2; i < 2 + n; i++) {
    if (i >= argc || argv[i][0] == '-') {
      return st_error(ST_ERR_INVALID_ARG, "expected %s before any flag", what);
    }
  }
  return ST_OK;
}

/* What distinguishes one command here from another. */
typedef struct ckpt_command {
  const char *name, *usage, *summary;
  int paths;        /* positional paths; the first is the checkpoint */
  const char *what; /* the paths, for the message when they are missing */
  const cli_flag *flags;
  int nflags;
  /* The command's work on the opened checkpoint; argv[2..] are the paths. */
  st_status (*run)(ckpt_source *src, char **argv, void *ctx);
  void *ctx;
} ckpt_command;

/* Parses, opens the checkpoint, runs the command and reports: 0 on success; a file that is not
 * what it claims (damaged, truncated) is a failure of the data (1); a path or flag the user got
 * wrong is bad input (2). One error line either way. */
static int run_command(int argc, char **argv, const ckpt_command *c) {
  int help = 0;
  for (int i = 2; i < argc; i++) {
    help |= strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
  }
  if (help) {
    cli_print_help(stdout, c->usage, c->summary, c->flags, c->nflags);
    return 0;
  }
  st_status status = positionals(argc, argv, c->paths, c->what);
  if (status == ST_OK) status = cli_parse(argc, argv, 2 + c->paths, c->flags, c->nflags, &help);
  ckpt_source *src = NULL;
  if (status == ST_OK) status = ckpt_source_open(&src, argv[2]);
  if (status == ST_OK) status = c->run(src, argv, c->ctx);
  ckpt_source_close(src);
  if (status == ST_OK) return 0;
  fprintf(stderr, "shardtrain %s: error: %s\n", c->name, st_last_error());
  return status == ST_ERR_FORMAT || status == ST_ERR_IO ? 1 : exit_code_for(status);
}

typedef struct reshard_target {
  int R, S, T, zero;
} reshard_target;

/* DST's parent directory, created (one level, as train creates --ckpt-dir) when missing, so
 * that `reshard ckpt/step_N ckpt8/step_N` makes ckpt8 as train would; `created` receives its
 * path when this made it, else "". */
static st_status make_parent(const char *dst, char *created, size_t size) {
  created[0] = '\0';
  size_t len = strlen(dst);
  while (len > 1 && dst[len - 1] == '/') len--;
  while (len > 0 && dst[len - 1] != '/') len--;
  while (len > 1 && dst[len - 1] == '/') len--;
  if (len == 0 || len >= size) return ST_OK; /* in "." or "/", or output_dir_check's */
  char parent[4096];
  snprintf(parent, sizeof parent, "%.*s", (int)len, dst);
  struct stat st;
  if (stat(parent, &st) == 0 || errno != ENOENT) return ST_OK; /* output_dir_check judges it */
  /* Its own parent missing too (ENOENT): output_dir_check names the directory that is not. */
  if (mkdir(parent, 0777) == 0) {
    snprintf(created, size, "%s", parent);
  } else if (errno != ENOENT && errno != EEXIST) { /* EEXIST: made meanwhile, say by a twin */
    return st_error(ST_ERR_INVALID_ARG, "DST %s: cannot create directory %s: %s", dst, parent,
                    strerror(errno));
  }
  return ST_OK;
}

/* Everything that can be refused is checked before DST's parent is made, and a parent made
 * for a reshard that failed is removed again: a refused command leaves no trace. */
static st_status reshard(ckpt_source *src, char **argv, void *ctx) {
  const reshard_target *t = ctx;
  ST_CHECK(output_path_outside("DST", argv[3], "SRC", argv[2]));
  ST_CHECK(ckpt_reshard_check(src, argv[3], t->R, t->S, t->T, t->zero));
  char created[4096];
  ST_CHECK(make_parent(argv[3], created, sizeof created));
  st_status status = output_dir_check("DST", argv[3]);
  if (status == ST_OK) status = ckpt_reshard(src, argv[3], t->R, t->S, t->T, t->zero);
  if (status != ST_OK) {
    if (created[0]) rmdir(created);
    return status;
  }
  printf("resharded %s -> %s (mesh %dx%dx%d, ZeRO-%d)\n", argv[2], argv[3], t->R, t->S, t->T,
         t->zero);
  return ST_OK;
}

int cmd_reshard(int argc, char **argv) {
  reshard_target t = {1, 1, 1, 3};
  const cli_flag flags[] = {
      {"dp-replicate", FLAG_INT, &t.R, "replicate groups R of the target mesh"},
      {"dp-shard", FLAG_INT, &t.S, "shard group size S of the target mesh"},
      {"tp", FLAG_INT, &t.T, "tensor-parallel size T of the target mesh"},
      {"zero", FLAG_INT, &t.zero, "ZeRO stage recorded for the target"},
  };
  const ckpt_command c = {"reshard",
                          "shardtrain reshard SRC DST [flags]",
                          "Writes checkpoint SRC (a step directory) for another mesh as the new "
                          "step\ndirectory DST, on one process, memory bounded by one chunk.",
                          2,
                          "SRC and DST",
                          flags,
                          4,
                          reshard,
                          &t};
  return run_command(argc, argv, &c);
}

static st_status export_hf(ckpt_source *src, char **argv, void *ctx) {
  (void)ctx;
  ST_CHECK(output_path_outside("OUT", argv[3], "CKPT", argv[2]));
  ST_CHECK(output_path_check("OUT", argv[3], 0));
  ST_CHECK(ckpt_export_hf(src, argv[3]));
  printf("exported %s -> %s\n", argv[2], argv[3]);
  return ST_OK;
}

int cmd_export(int argc, char **argv) {
  const ckpt_command c = {"export",
                          "shardtrain export CKPT OUT.safetensors",
                          "Writes the checkpoint's fp32 weights as one Hugging Face GPT-2 "
                          "safetensors\nfile (the same file `shardtrain train --export` writes).",
                          2,
                          "CKPT and OUT",
                          NULL,
                          0,
                          export_hf,
                          NULL};
  return run_command(argc, argv, &c);
}

static st_status describe(ckpt_source *src, char **argv, void *ctx) {
  (void)argv;
  (void)ctx;
  return ckpt_describe(src, stdout);
}

int cmd_inspect(int argc, char **argv) {
  const ckpt_command c = {"inspect",
                          "shardtrain inspect CKPT",
                          "Prints a checkpoint's manifest and sizes and verifies every file's "
                          "SHA-256\n(exit 1 when one does not hold).",
                          1,
                          "CKPT",
                          NULL,
                          0,
                          describe,
                          NULL};
  return run_command(argc, argv, &c);
}
