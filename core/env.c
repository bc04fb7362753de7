/* env.c - the table of environment variables and their parsing. */
#include "core/env.h"

#include <math.h>
#include <stdlib.h>

static const env_entry entries[ENV_VAR_COUNT] = {
    [ENV_LOG_LEVEL] = {"ST_LOG_LEVEL", "info", "log level: error, warn, info or debug"},
    [ENV_COMM_TIMEOUT] = {"ST_COMM_TIMEOUT", "300",
                          "seconds a collective, or a host wait for a GPU's queued work, may take "
                          "before every rank is aborted"},
    [ENV_DEVICE] = {"ST_DEVICE", "auto", "device for compute: cpu, cuda or auto"},
    [ENV_CKPT_TEST_DELAY_MS] = {"ST_CKPT_TEST_DELAY_MS", "0",
                                "testing: milliseconds each rank waits after writing its "
                                "checkpoint file, before the checkpoint is completed"},
    [ENV_MEMORY_LIMIT_BYTES] = {"ST_MEMORY_LIMIT_BYTES", "none",
                                "caps the memory the start-up fit check finds on the device "
                                "(a GPU's free memory; on the CPU the host's available RAM, "
                                "before it is shared among the node's ranks), in bytes"},
    [ENV_NCCL_HOSTID] =
        {"NCCL_HOSTID", "unset",
         "NCCL's host identity; ranks that share a GPU may use the NCCL backend "
         "when each sets a distinct one (unset: NCCL tells hosts apart by name and boot id; "
         "set but empty: refused on a GPU, NCCL would take it for a host id)"},
    [ENV_TEST_INJECT_OVERFLOW] = {"ST_TEST_INJECT_OVERFLOW", "none",
                                  "testing: STEP:RANK puts an inf into world rank RANK's "
                                  "gradients at step STEP (from 0), as an fp16 overflow would"},
    [ENV_CUDA_ATTENTION] = {"ST_CUDA_ATTENTION", "cudnn",
                            "the CUDA backend's attention kernels: cudnn (cuDNN's fused "
                            "attention; 16-bit, head sizes 8 to 128 by 8; flash where cuDNN "
                            "cannot be loaded), flash (tiled on the tensor cores; 16-bit, head "
                            "size 64) or simple (a warp per row); each leaves a shape it does not "
                            "take to the next"},
    [ENV_OMPI_WORLD_SIZE] = {"OMPI_COMM_WORLD_SIZE", "unset",
                             "Open MPI's launcher's; read (with PMI_SIZE and PMIX_RANK) to know "
                             "whether other ranks were started with this one"},
    [ENV_PMI_SIZE] = {"PMI_SIZE", "unset", "the PMI launchers' (MPICH, Slurm); read as above"},
    [ENV_PMIX_RANK] = {"PMIX_RANK", "unset", "the PMIx launchers'; read as above"},
    [ENV_IO_TIMEOUT] = {"ST_IO_TIMEOUT", "1800",
                        "seconds a rank's checkpoint or export write may go without progress "
                        "before the rank is ended"},
    [ENV_WRITE_TEST_DELAY_MS] = {"ST_WRITE_TEST_DELAY_MS", "0",
                                 "testing: milliseconds the writing rank waits, inside the "
                                 "write's ST_IO_TIMEOUT, before it writes an export file or a "
                                 "metrics line"},
    [ENV_SLURM_STEP_TASKS] = {"SLURM_STEP_NUM_TASKS", "unset",
                              "srun's; read (with OMPI_COMM_WORLD_SIZE and PMI_SIZE) to find "
                              "tasks that MPI did not join into one world"},
    [ENV_TEST_NODE] = {"ST_TEST_NODE", "unset",
                       "testing: the node this rank reports to the mesh's placement checks, "
                       "in place of its host's name and boot id (ranks of one machine "
                       "standing for several nodes)"},
};

const env_entry *env_table(void) { return entries; }

const char *env_lookup(env_var var) {
  const char *v = getenv(entries[var].name);
  return (v && *v) ? v : NULL;
}

int env_launched_by_mpi(void) {
  return env_lookup(ENV_OMPI_WORLD_SIZE) || env_lookup(ENV_PMI_SIZE) || env_lookup(ENV_PMIX_RANK);
}

long env_launched_tasks(const char **name) {
  /* The MPI launchers' own counts first: srun's may be inherited from an allocation by an
   * mpirun inside it that starts fewer. */
  static const env_var counts[] = {ENV_OMPI_WORLD_SIZE, ENV_PMI_SIZE, ENV_SLURM_STEP_TASKS};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    const char *v = env_lookup(counts[i]);
    char *end = NULL;
    const long n = v ? strtol(v, &end, 10) : 0;
    if (v && *end == '\0' && n > 0) {
      if (name) *name = entries[counts[i]].name;
      return n;
    }
  }
  return 0;
}

int env_is_set_empty(env_var var) {
  const char *v = getenv(entries[var].name);
  return v && !*v;
}

const char *env_get_string(env_var var) {
  const char *v = env_lookup(var);
  return v ? v : entries[var].default_value;
}

double env_get_positive(env_var var, int *ok) {
  double fallback = strtod(entries[var].default_value, NULL);
  const char *v = env_get_string(var);
  char *end = NULL;
  double x = strtod(v, &end);
  *ok = end != v && *end == '\0' && x > 0 && isfinite(x);
  return *ok ? x : fallback;
}
