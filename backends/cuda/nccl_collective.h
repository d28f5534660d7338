// NCCL collectives for sets of CUDA devices: one process driving several GPUs (ncclCommInitAll),
// or one rank of a multi-process job (ncclCommInitRank with a unique id handed out by MPI).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trident/core/collective.h"

namespace trident {

// Registers the NCCL factory for the "cuda" backend with register_collective_factory, so that
// make_collective() returns NCCL for any set of two or more CUDA devices. Call it once, when the
// CUDA backend is registered (register_builtin.cpp / make_cuda_backend()); calling again is harmless.
void register_nccl_collective();

// A communicator per device within this process; nullptr when a device is not a CudaDevice.
std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices);

// NCCL's unique id (NCCL_UNIQUE_ID_BYTES = 128 bytes) as raw bytes, so that core/mpi can
// broadcast it without including nccl.h. Rank 0 of the job creates it, everyone receives it.
std::string nccl_unique_id();

// This process's share of a job of `total_ranks` GPUs: its devices are ranks first_rank,
// first_rank + 1, ... of the communicator named by `unique_id`. Every process must call this at
// the same time (ncclCommInitRank blocks until all ranks have joined).
std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices,
                                                 const std::string& unique_id, int first_rank,
                                                 int total_ranks);

}  // namespace trident
