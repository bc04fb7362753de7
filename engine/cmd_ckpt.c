/* cmd_ckpt.c - the offline checkpoint commands, each on one process (no mpirun needed):
 *   shardtrain reshard SRC DST --dp-replicate R --dp-shard S --tp T [--zero Z]
 *   shardtrain export CKPT OUT.safetensors
 *   shardtrain inspect CKPT
 * Paths come first, then flags. Bad input exits 2 with one error line; a damaged checkpoint
 * exits 1. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "engine/ckpt_offline.h"
#include "engine/cli_flags.h"
#include "engine/commands.h"

/* argv[2 .. 2 + n): the command's paths, which must all be there before any flag. */
static st_status positionals(int argc, char **argv, int n, const char *what) {
  for (int i = 2; i < 2 + n; i++) {
    if (i >= argc || argv[i][0] == '-') {
      return st_error(ST_ERR_INVALID_ARG, "expected %s before any flag", what);
    }
  }
  return ST_OK;
}

/* Parses the flags after n paths, printing help on --help. Returns -1 to go on, else the
 * exit code. */
static int parse(int argc, char **argv, int n, const char *usage, const char *summary,
                 const cli_flag *flags, int nflags, const char *what, st_status *status) {
  int help = 0;
  for (int i = 2; i < argc; i++)
    help |= strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
  if (help) {
    cli_print_help(stdout, usage, summary, flags, nflags);
    return 0;
  }
  *status = positionals(argc, argv, n, what);
  if (*status == ST_OK) *status = cli_parse(argc, argv, 2 + n, flags, nflags, &help);
  return -1;
}

/* Opens the checkpoint, runs `body` on it and reports as every command here does. */
static int finish(const char *command, st_status status, ckpt_source *src) {
  ckpt_source_close(src);
  if (status == ST_OK) return 0;
  fprintf(stderr, "shardtrain %s: error: %s\n", command, st_last_error());
  /* A file that is not what it claims (damaged, truncated) is a failure of the data (1); a
   * path or flag the user got wrong is bad input (2). */
  return status == ST_ERR_FORMAT || status == ST_ERR_IO ? 1 : exit_code_for(status);
}

int cmd_reshard(int argc, char **argv) {
  int R = 1, S = 1, T = 1, zero = 3;
  const cli_flag flags[] = {
      {"dp-replicate", FLAG_INT, &R, "replicate groups R of the target mesh"},
      {"dp-shard", FLAG_INT, &S, "shard group size S of the target mesh"},
      {"tp", FLAG_INT, &T, "tensor-parallel size T of the target mesh"},
      {"zero", FLAG_INT, &zero, "ZeRO stage recorded for the target"},
  };
  st_status status = ST_OK;
  int code = parse(argc, argv, 2, "shardtrain reshard SRC DST [flags]",
                   "Writes checkpoint SRC (a step directory) for another mesh as the new step\n"
                   "directory DST, on one process, memory bounded by one tensor.",
                   flags, 4, "SRC and DST", &status);
  if (code >= 0) return code;
  ckpt_source *src = NULL;
  if (status == ST_OK) status = ckpt_source_open(&src, argv[2]);
  if (status == ST_OK) status = ckpt_reshard(src, argv[3], R, S, T, zero);
  if (status == ST_OK)
    printf("resharded %s -> %s (mesh %dx%dx%d, ZeRO-%d)\n", argv[2], argv[3], R, S, T, zero);
  return finish("reshard", status, src);
}

int cmd_export(int argc, char **argv) {
  st_status status = ST_OK;
  int code = parse(argc, argv, 2, "shardtrain export CKPT OUT.safetensors",
                   "Writes the checkpoint's fp32 weights as one Hugging Face GPT-2 safetensors\n"
                   "file (the same file `shardtrain train --export` writes).",
                   NULL, 0, "CKPT and OUT", &status);
  if (code >= 0) return code;
  ckpt_source *src = NULL;
  if (status == ST_OK) status = ckpt_source_open(&src, argv[2]);
  if (status == ST_OK) status = ckpt_export_hf(src, argv[3]);
  if (status == ST_OK) printf("exported %s -> %s\n", argv[2], argv[3]);
  return finish("export", status, src);
}

int cmd_inspect(int argc, char **argv) {
  st_status status = ST_OK;
  int code = parse(argc, argv, 1, "shardtrain inspect CKPT",
                   "Prints a checkpoint's manifest and sizes and verifies every file's SHA-256\n"
                   "(exit 1 when one does not hold).",
                   NULL, 0, "CKPT", &status);
  if (code >= 0) return code;
  ckpt_source *src = NULL;
  if (status == ST_OK) status = ckpt_source_open(&src, argv[2]);
  if (status == ST_OK) status = ckpt_describe(src, stdout);
  return finish("inspect", status, src);
}
