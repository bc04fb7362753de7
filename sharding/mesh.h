/* mesh.h - the process mesh inside the library: world = R x S x T ranks with
 * rank = (r * S + s) * T + t, its groups' communicators, and the compute device it chose.
 * The public half (create, destroy, coordinates) is declared in shardtrain.h. */
#ifndef ST_SHARDING_MESH_H
#define ST_SHARDING_MESH_H

#include <mpi.h>

#include "core/device.h"
#include "sharding/comm.h"
#include "shardtrain.h"

/* The communicator of a group; never NULL for a created mesh. */
comm *mesh_comm(const st_mesh *mesh, st_group group);

/* The mesh's duplicate of MPI_COMM_WORLD for the library's own checks and agreements (errors
 * come back as codes): never the program's MPI_COMM_WORLD, whose collectives a program may
 * have in flight, from another thread or not yet completed, while it calls the library. */
MPI_Comm mesh_control(const st_mesh *mesh);

/* Puts `replacement` (same ranks; the mesh owns it from now on) in place of a group's
 * communicator and returns the old one, now the caller's: for tests that stand another backend
 * in for a group. */
comm *mesh_swap_comm(st_mesh *mesh, st_group group, comm *replacement);

/* The device every rank computes on (chosen from $ST_DEVICE, or the mesh config's request). */
const st_device *mesh_device(const st_mesh *mesh);

/* Meshes and units on a mesh not yet destroyed (a unit counts from mesh_hold to mesh_unhold):
 * st_finalize refuses while any is live, since destroying them needs MPI. */
int mesh_live_handles(void);

/* A unit created on the mesh holds it until destroyed: st_mesh_destroy of a mesh that units
 * still hold only marks it, and the last mesh_unhold frees it, so the units' communicators and
 * device stay valid whatever order the program destroys them in. */
void mesh_hold(const st_mesh *mesh);
void mesh_unhold(const st_mesh *mesh);

const char *mesh_group_name(st_group group);

/* Checks a mesh against a world size without communicating, so every rank reaches the same
 * verdict. Resolves dp_shard = 0 to world / (R * T) and nccl_max_ctas = 0 to its default.
 * Fills *resolved on success. */
st_status mesh_validate(const st_mesh_config *config, int world_size, st_mesh_config *resolved);

/* Coordinates of world rank `rank` in a validated mesh. */
void mesh_coords_of(const st_mesh_config *mesh, int rank, int *r, int *s, int *t);

#endif /* ST_SHARDING_MESH_H */
