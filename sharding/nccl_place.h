/* nccl_place.h - whether NCCL can connect the job's ranks, decided from what each rank reports
 * of its GPU and its NCCL_HOSTID. A pure function of the gathered table: every rank that holds
 * the same table reaches the same verdict, and tests can feed it any table.
 *
 * NCCL refuses two ranks it sees on one GPU ("Duplicate GPU detected"). It names a GPU by its
 * host and its PCI bus id, and a host by NCCL_HOSTID when that is set, else by the node. So
 * ranks that share a physical GPU are accepted when each sets an NCCL_HOSTID that no other
 * rank on that GPU uses: NCCL then takes them for separate hosts and joins them through its
 * socket transport, which is for correctness runs on one GPU, never for speed. Two ranks on
 * different nodes that set one NCCL_HOSTID must not have GPUs with the same bus id either:
 * NCCL would take those for one GPU too. */
#ifndef ST_SHARDING_NCCL_PLACE_H
#define ST_SHARDING_NCCL_PLACE_H

#include <stdint.h>

#include "core/device.h"
#include "shardtrain.h"

/* One rank's report; plain bytes, so it is gathered as it is (every rank runs one binary). */
typedef struct nccl_place_rank {
  uint64_t node;                   /* hash of the node's name */
  uint64_t host_id;                /* hash of NCCL_HOSTID, when has_host_id */
  int32_t has_host_id;             /* NCCL_HOSTID is set and not empty */
  int32_t on_gpu;                  /* the rank computes on a GPU */
  int32_t has_nccl;                /* the rank's build has the NCCL backend */
  char bus_id[DEVICE_BUS_ID_SIZE]; /* the GPU's PCI bus id ("" without a GPU) */
} nccl_place_rank;

/* A report from its parts: the node's name, bus_id NULL without a GPU, host_id NULL when
 * NCCL_HOSTID is unset. */
void nccl_place_rank_make(nccl_place_rank *out, const char *node, int has_nccl, const char *bus_id,
                          const char *host_id);

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

#endif /* ST_SHARDING_NCCL_PLACE_H */
