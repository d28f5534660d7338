// Shared by core/mpi/*.cpp: the job's communicator, error checks that name the MPI call, and
// waits for the other processes that give up after TRIDENT_COLLECTIVE_TIMEOUT_S.
#pragma once
// The C API is all Trident uses; skip the deprecated C++ bindings (and their warnings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "trident/core/mpi/process_group.h"

namespace trident::mpi {

[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

#define TRIDENT_MPI_CHECK(call)                                                       \
  do {                                                                                \
    const int trident_mpi_code_ = (call);                                             \
    if (trident_mpi_code_ != MPI_SUCCESS)                                             \
      ::trident::mpi::throw_mpi_error(trident_mpi_code_, #call, __FILE__, __LINE__);  \
  } while (0)

// The job's communicator: a duplicate of MPI_COMM_WORLD whose errors come back as codes (the
// default handler would abort before a message naming the call could be written).
struct World {
  MPI_Comm comm = MPI_COMM_NULL;
  ProcessGroup group;  // without the collective
};
World& world();  // initialises MPI on first use

// Waits for a non-blocking operation by testing it, and throws CollectiveTimeout once
// `timeout_s` (0: none) has passed: blocking MPI calls would wait forever for a process that
// stopped or died without ending the job. `what` and `when` complete the message: "... in the
// gradient all-reduce" "of step 12".
void wait_or_time_out(MPI_Request& request, double timeout_s, const std::string& what,
                      const std::string& when);

// Element-wise minima of `values` over every process (MPI_Iallreduce, bounded by the timeout).
std::vector<int64_t> min_over_processes(const std::vector<int64_t>& values,
                                        const std::string& what);

// Host staging on this process's devices plus an MPI sum across the processes.
std::unique_ptr<Collective> make_mpi_host_collective(const std::vector<Device*>& devices);

}  // namespace trident::mpi
