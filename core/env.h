/* env.h - every environment variable the library reads, declared in one table (env.c) with
 * its default and meaning; docs/ENVIRONMENT.md lists the same table. Nothing else in the
 * library calls getenv. */
#ifndef ST_CORE_ENV_H
#define ST_CORE_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum env_var {
  ENV_LOG_LEVEL = 0,            /* ST_LOG_LEVEL */
  ENV_COMM_TIMEOUT = 1,         /* ST_COMM_TIMEOUT */
  ENV_DEVICE = 2,               /* ST_DEVICE */
  ENV_CKPT_TEST_DELAY_MS = 3,   /* ST_CKPT_TEST_DELAY_MS */
  ENV_MEMORY_LIMIT_BYTES = 4,   /* ST_MEMORY_LIMIT_BYTES */
  ENV_NCCL_HOSTID = 5,          /* NCCL_HOSTID (NCCL's own; read to know what NCCL will see) */
  ENV_TEST_INJECT_OVERFLOW = 6, /* ST_TEST_INJECT_OVERFLOW */
  ENV_CUDA_ATTENTION = 7,       /* ST_CUDA_ATTENTION */
  ENV_OMPI_WORLD_SIZE = 8,      /* OMPI_COMM_WORLD_SIZE (set by Open MPI's mpirun) */
  ENV_PMI_SIZE = 9,             /* PMI_SIZE (set by MPICH's and Slurm's PMI launchers) */
  ENV_PMIX_RANK = 10,           /* PMIX_RANK (set by PMIx launchers: prterun, srun --mpi=pmix) */
  ENV_IO_TIMEOUT = 11,          /* ST_IO_TIMEOUT */
  ENV_WRITE_TEST_DELAY_MS = 12, /* ST_WRITE_TEST_DELAY_MS */
  ENV_SLURM_STEP_TASKS = 13,    /* SLURM_STEP_NUM_TASKS (set by srun for every task of a step) */
  ENV_TEST_NODE = 14,           /* ST_TEST_NODE */
  ENV_VAR_COUNT = 15
} env_var;

typedef struct env_entry {
  const char *name;
  const char *default_value;
  const char *meaning;
} env_entry;

/* The table, ENV_VAR_COUNT entries, in env_var order. */
const env_entry *env_table(void);

/* The variable's value, or its default when unset or empty. */
const char *env_get_string(env_var var);

/* The variable's value, or NULL when unset or empty: for a variable whose absence means
 * something no value can stand for (NCCL_HOSTID). */
const char *env_lookup(env_var var);

/* Whether a launcher (mpirun, srun) started this process as one rank of several: any of the
 * launchers' variables set. Without one, MPI would start as a singleton of one rank. */
int env_launched_by_mpi(void);

/* How many tasks a launcher says it started with this process: the first of
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE and SLURM_STEP_NUM_TASKS that holds a positive number (an MPI
 * launcher's count over srun's, which an mpirun inside an allocation inherits), 0 when none
 * does. *name (when not NULL) receives that variable's name. */
long env_launched_tasks(const char **name);

/* Whether the variable is set to the empty string, which env_lookup reads as unset: for a
 * variable whose other reader tells the two apart (NCCL takes NCCL_HOSTID="" for a host id). */
int env_is_set_empty(env_var var);

/* The value parsed as a positive number; the default when unset. Sets *ok = 0 (and returns
 * the default) when the value is not a finite positive number ("inf" and "1e999" included). */
double env_get_positive(env_var var, int *ok);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_ENV_H */
