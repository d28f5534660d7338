// NCCL collectives for sets of CUDA devices: one process driving several GPUs (ncclCommInitAll),
// or one rank of a multi-process job (ncclCommInitRank, bootstrapped through the process
// collective hook of core/collective.h, so that core/mpi never includes this header).
#pragma once
#include <memory>
#include <vector>

#include "trident/core/collective.h"

namespace trident {

// Registers NCCL for the "cuda" backend twice: with register_collective_factory, so that
// make_collective() returns NCCL for any set of two or more CUDA devices of one process, and
// with register_process_collective_factory, so that a job of several processes whose devices
// are all CUDA GPUs sums through one communicator. Call it once, when the CUDA backend is
// registered (register_builtin.cpp); calling again is harmless.
void register_nccl_collective();

// A communicator per device within this process; nullptr when a device is not a CudaDevice.
std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices);

}  // namespace trident
