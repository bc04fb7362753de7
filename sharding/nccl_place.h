/* nccl_place.h - the job's placement, decided from what each rank reports of its node, its
 * device and its NCCL_HOSTID: whether the ranks compute on one kind of device, whether NCCL can
 * connect them, and whether each tensor-parallel group sits on one node. Pure functions of the
 * gathered table: every rank that holds the same table reaches the same verdict, and tests can
 * feed them any table.
 *
 * NCCL refuses two ranks it sees on one GPU ("Duplicate GPU detected"). It names a GPU by its
 * host and its PCI bus id, and a host by NCCL_HOSTID when that is set, else by the hostname
 * followed by the kernel's boot id (/proc/sys/kernel/random/boot_id; its getHostHash), so that
 * containers on different machines that share a hostname are still different hosts. The report
 * names a node the same way (MPI's processor name and the boot id). So ranks that share a
 * physical GPU are accepted when each sets an NCCL_HOSTID that no other rank on that GPU uses:
 * NCCL then takes them for separate hosts and joins them through its socket transport, which is
 * for correctness runs on one GPU, never for speed. Two ranks on different nodes that set one
 * NCCL_HOSTID must not have GPUs with the same bus id either: NCCL would take those for one GPU
 * too. */
#ifndef ST_SHARDING_NCCL_PLACE_H
#define ST_SHARDING_NCCL_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/error.h"
#include "shardtrain.h"

/* Room for a node's name in a report, for messages only (cut to fit; the hash is of the whole
 * name). Linux's hostnames have at most 64 bytes. */
#define NCCL_PLACE_NODE_NAME_SIZE 64

/* Where NCCL reads the boot id it adds to the hostname. */
#define NCCL_PLACE_BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"

/* Room for a boot id (a UUID, 36 characters) and its terminator. */
#define NCCL_PLACE_BOOT_ID_SIZE 64

/* One rank's report; plain bytes, so it is gathered as it is (every rank runs one binary). */
typedef struct nccl_place_rank {
  uint64_t node;                             /* hash of the node's name and boot id */
  uint64_t host_id;                          /* hash of NCCL_HOSTID, when has_host_id */
  int32_t has_host_id;                       /* NCCL_HOSTID is set and not empty */
  int32_t on_gpu;                            /* the rank computes on a GPU */
  int32_t has_nccl;                          /* the rank's build has the NCCL backend */
  int32_t device_auto;                       /* the rank's device was chosen by `auto` */
  char bus_id[DEVICE_BUS_ID_SIZE];           /* the GPU's PCI bus id ("" without a GPU) */
  char node_name[NCCL_PLACE_NODE_NAME_SIZE]; /* the node's name, for messages */
} nccl_place_rank;

/* What a report is made from. */
typedef struct nccl_place_parts {
  const char *node;    /* MPI's processor name */
  const char *boot_id; /* the kernel's boot id; NULL where unreadable (NCCL then uses the name) */
  const char *bus_id;  /* the GPU's PCI bus id; NULL on the CPU */
  const char *host_id; /* NCCL_HOSTID; NULL when unset */
  int has_nccl;        /* the build has the NCCL backend */
  int device_auto;     /* the device was chosen by `auto` */
} nccl_place_parts;

void nccl_place_rank_make(nccl_place_rank *out, const nccl_place_parts *parts);

/* Reads a boot id as NCCL does (the file's first word) from `path` into out; 0 when the file
 * cannot be read or holds no word (NCCL then names the host by its name alone). */
int nccl_place_read_boot_id(const char *path, char *out, size_t size);

/* A GPU as one party names it: a host (a node, or an NCCL_HOSTID when named_by_id) and a bus
 * id, with the rank that reported it. Only nccl_place_check reads and writes these. */
typedef struct nccl_place_name {
  int32_t named_by_id;
  int32_t rank;
  uint64_t host;
  const char *bus_id;
} nccl_place_name;

/* ST_OK when NCCL can connect all n ranks, with *shares_gpu = 1 when some of them share a GPU
 * (NCCL will use its socket transport between them). Otherwise ST_ERR_UNSUPPORTED and one
 * sentence, the same on every rank, that names the first offending rank or pair by rank number
 * and, for ranks without NCCL or a GPU, how many there are ("every rank" when all).
 * `scratch` holds n entries; it is passed in so that the check cannot fail on one rank alone
 * (an allocation) while the others go on into NCCL. */
st_status nccl_place_check(const nccl_place_rank *ranks, int n, nccl_place_name *scratch,
                           int *shares_gpu);

/* ST_OK unless some ranks compute on the CPU and others on a GPU while a rank's device was
 * chosen by `auto` (a node whose driver is broken, or with fewer GPUs): then
 * ST_ERR_UNSUPPORTED, one line naming the first CPU ranks and their nodes and that
 * `--device cpu` runs them all on the CPU. A mix asked for by name (cpu on some ranks, cuda on
 * the others) is the caller's choice and passes. */
st_status nccl_place_check_devices(const nccl_place_rank *ranks, int n);

/* For a job NCCL can join: a pair of ranks (*a < *b) on one node and different GPUs whose
 * NCCL_HOSTIDs make NCCL take them for two hosts (the ids differ, or one rank sets one and the
 * other not), so that it joins them through its network transport instead of NVLink or shared
 * memory; 0 (and -1s) when there is none. The same pair on every rank that holds the same table.
 * An NCCL_HOSTID is for ranks that share a GPU; set on a node of several GPUs it costs their
 * links silently. scratch as for nccl_place_check. */
int nccl_place_split_node(const nccl_place_rank *ranks, int n, nccl_place_name *scratch, int *a,
                          int *b);

/* The collective backend the job takes. */
typedef struct nccl_place_choice {
  st_comm_backend backend;            /* ST_COMM_MPI or ST_COMM_NCCL */
  int shares_gpu;                     /* NCCL joins ranks that share a GPU: correct, slow */
  int split_a, split_b;               /* with NCCL, nccl_place_split_node's pair, else -1 */
  int gpu_fallback;                   /* `auto` took MPI though every rank computes on a GPU */
  char reason[ST_ERROR_DETAIL_BYTES]; /* why NCCL could not join them, when gpu_fallback */
} nccl_place_choice;

/* The backend for `request` (auto, mpi or nccl) over the n reports, after
 * nccl_place_check_devices: mpi is MPI; nccl is NCCL, or nccl_place_check's refusal; auto is
 * NCCL where nccl_place_check accepts, else MPI (a refusal then is no error, and the thread's
 * last error is left as it was), flagged gpu_fallback with the refusal's reason when every rank
 * has a GPU, so that the caller can say why NCCL is not used; a job on the CPU takes MPI
 * silently. ST_ERR_INVALID_ARG for any other request. scratch as for nccl_place_check. */
st_status nccl_place_choose(const nccl_place_rank *ranks, int n, st_comm_backend request,
                            nccl_place_name *scratch, nccl_place_choice *out);

/* For a mesh whose tensor-parallel groups are the blocks of tp consecutive world ranks
 * (rank = (r * S + s) * T + t; tp divides n): the smallest number of ranks of one tp group that
 * share a node (a rank counts itself), tp when every group sits on one node, and in
 * *first_rank the lowest world rank that has only that many of its group on its node. */
int nccl_place_tp_node_share(const nccl_place_rank *ranks, int n, int tp, int *first_rank);

#endif /* ST_SHARDING_NCCL_PLACE_H */
