// The processes of one training job: a single process normally, the ranks of an MPI job when
// launched by mpirun (one process per GPU, possibly across machines). Usable in every build: a
// build without MPI reports a clear error when it finds itself started by mpirun.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/collective.h"
#include "trident/core/error.h"

namespace trident {

struct ProcessGroup {
  int size = 1, rank = 0;              // processes in the job, and this one's place among them
  int local_size = 1, local_rank = 0;  // the same, counting only this machine's processes
  // The collective over this process's devices and every other process's (NCCL when all are
  // CUDA GPUs, else host staging plus MPI_Allreduce); unset for a single process.
  std::function<std::unique_ptr<Collective>(const std::vector<Device*>&)> collective;
  bool leader() const { return rank == 0; }  // the one process that prints and saves
};

// The process count the launcher announced (Open MPI's mpirun, or a PMI launcher: MPICH's
// mpiexec, Slurm's srun), read from the environment before MPI is initialised; 1 otherwise.
inline int launched_process_count() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* value = std::getenv(name);
    if (value && *value) return std::max(1, std::atoi(value));
  }
  return 1;
}

#ifdef TRIDENT_HAVE_MPI
// Under a launcher with more than one process: initialises MPI (once; finalised at exit) and
// returns this process's place in the job. Otherwise a group of one, and MPI stays untouched.
ProcessGroup join_process_group();
// This process's share of `listed` (the --devices / TRIDENT_DEVICES list, else the default
// device): a list of k * local_size devices gives each process k consecutive ones; by default
// each process takes its backend's device number local_rank; a single device is every
// process's (the CPU, or one GPU per process made visible by CUDA_VISIBLE_DEVICES).
std::vector<Device*> process_devices(const std::vector<Device*>& listed, bool listed_by_user,
                                     const ProcessGroup& group);
// After a failure on this process: prints it with the rank to `err` and ends the whole job
// (MPI_Abort), since the other processes would wait forever in their next all-reduce.
[[noreturn]] void abort_process_group(const ProcessGroup& group, const std::string& message,
                                      int status, std::ostream& err);
#else
inline ProcessGroup join_process_group() {
  if (launched_process_count() > 1)
    throw UsageError("started by mpirun with " + std::to_string(launched_process_count()) +
                     " processes, but this trident was built without MPI: every process would "
                     "train alone. Rebuild with -DTRIDENT_WITH_MPI=ON (libopenmpi-dev), or run "
                     "one process with --devices listing several devices.");
  return {};
}
inline std::vector<Device*> process_devices(const std::vector<Device*>& listed, bool,
                                            const ProcessGroup&) {
  return listed;
}
[[noreturn]] inline void abort_process_group(const ProcessGroup&, const std::string& message,
                                             int, std::ostream&) {
  throw Error(message);  // unreachable: a group of one never aborts others
}
#endif

}  // namespace trident
