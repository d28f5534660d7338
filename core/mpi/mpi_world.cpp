// The MPI side of data parallelism: joining the job, splitting the devices among the processes
// of one machine, and the cross-process all-reduce (host staging + MPI_Allreduce, or NCCL with
// its unique id broadcast by MPI when every device is a CUDA GPU).
// The C API is all this file uses; skip the deprecated C++ bindings (and their warnings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <ostream>

#include "trident/core/env.h"
#include "trident/core/mpi/process_group.h"
#include "trident/core/registry.h"
#ifdef TRIDENT_HAVE_CUDA
#include "trident/backends/cuda/nccl_collective.h"
#endif

namespace trident {
namespace {

[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw BackendError(std::string("MPI call ") + call + " failed: " + std::string(text, length) +
                     " at " + file + ":" + std::to_string(line));
}

#define TRIDENT_MPI_CHECK(call)                                                       \
  do {                                                                                \
    const int trident_mpi_code_ = (call);                                             \
    if (trident_mpi_code_ != MPI_SUCCESS)                                             \
      throw_mpi_error(trident_mpi_code_, #call, __FILE__, __LINE__);                  \
  } while (0)

// The job's communicator: a duplicate of MPI_COMM_WORLD whose errors come back as codes (the
// default handler would abort before a message naming the call could be written).
struct World {
  MPI_Comm comm = MPI_COMM_NULL;
  ProcessGroup group;
};

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

World& world() {
  static World* w = [] {
    auto* created = new World();  // lives until exit, like the device registry
    int initialized = 0;
    TRIDENT_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      // Only the main thread calls MPI; replicas' threads never do.
      int provided = 0;
      TRIDENT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      std::atexit(finalize_mpi);
    }
    TRIDENT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &created->comm));
    TRIDENT_MPI_CHECK(MPI_Comm_set_errhandler(created->comm, MPI_ERRORS_RETURN));
    TRIDENT_MPI_CHECK(MPI_Comm_size(created->comm, &created->group.size));
    TRIDENT_MPI_CHECK(MPI_Comm_rank(created->comm, &created->group.rank));
    MPI_Comm local = MPI_COMM_NULL;  // the processes sharing this machine
    TRIDENT_MPI_CHECK(MPI_Comm_split_type(created->comm, MPI_COMM_TYPE_SHARED,
                                          created->group.rank, MPI_INFO_NULL, &local));
    TRIDENT_MPI_CHECK(MPI_Comm_size(local, &created->group.local_size));
    TRIDENT_MPI_CHECK(MPI_Comm_rank(local, &created->group.local_rank));
    TRIDENT_MPI_CHECK(MPI_Comm_free(&local));
    return created;
  }();
  return *w;
}

// Each process stages its devices' buffers on the host and sums them; MPI_Allreduce adds the
// processes' sums; the total goes back to every local device.
class MpiHostCollective : public Collective {
 public:
  MpiHostCollective(std::vector<Device*> devices, MPI_Comm comm, int processes)
      : devices_(std::move(devices)), comm_(comm), processes_(processes) {}
  std::string name() const override {
    return "mpi+host (" + std::to_string(processes_) + " processes)";
  }

  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    if (buffers.size() != devices_.size())
      throw Error("all_reduce_sum: " + std::to_string(buffers.size()) + " buffers for " +
                  std::to_string(devices_.size()) + " devices");
    const size_t n = static_cast<size_t>(count);
    sum_.resize(n);
    part_.resize(n);
    devices_[0]->copy_to_host(sum_.data(), buffers[0], n * sizeof(float));
    for (size_t d = 1; d < devices_.size(); ++d) {
      devices_[d]->copy_to_host(part_.data(), buffers[d], n * sizeof(float));
      for (size_t k = 0; k < n; ++k) sum_[k] += part_[k];
    }
    // MPI counts are int: large buffers go in chunks.
    constexpr size_t kChunk = size_t(1) << 30;
    for (size_t begin = 0; begin < n; begin += kChunk) {
      const int chunk = static_cast<int>(std::min(kChunk, n - begin));
      TRIDENT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sum_.data() + begin, chunk, MPI_FLOAT,
                                      MPI_SUM, comm_));
    }
    for (size_t d = 0; d < devices_.size(); ++d)
      devices_[d]->copy_from_host(buffers[d], sum_.data(), n * sizeof(float));
  }

 private:
  std::vector<Device*> devices_;
  MPI_Comm comm_;
  int processes_;
  std::vector<float> sum_, part_;
};

// Called by every process at the same point (the trainer's constructor).
std::unique_ptr<Collective> make_process_collective(const std::vector<Device*>& devices) {
  World& w = world();
  const int local = static_cast<int>(devices.size());
  int fewest = 0, most = 0;
  TRIDENT_MPI_CHECK(MPI_Allreduce(&local, &fewest, 1, MPI_INT, MPI_MIN, w.comm));
  TRIDENT_MPI_CHECK(MPI_Allreduce(&local, &most, 1, MPI_INT, MPI_MAX, w.comm));
  if (fewest != most)
    throw UsageError("every process of the MPI job must train on the same number of devices; "
                     "they have between " + std::to_string(fewest) + " and " +
                     std::to_string(most) + " (this one: " + std::to_string(local) + ")");
#ifdef TRIDENT_HAVE_CUDA
  // NCCL when every device of every process is a CUDA GPU (TRIDENT_MPI_NCCL=0 forces the host path).
  int all_cuda = env_flag("TRIDENT_MPI_NCCL", true) ? 1 : 0;
  for (Device* d : devices) all_cuda = all_cuda && d->info().backend == "cuda";
  int everywhere = 0;
  TRIDENT_MPI_CHECK(MPI_Allreduce(&all_cuda, &everywhere, 1, MPI_INT, MPI_MIN, w.comm));
  if (everywhere) {
    std::string id;
    if (w.group.rank == 0) id = nccl_unique_id();
    id.resize(128);  // NCCL_UNIQUE_ID_BYTES
    TRIDENT_MPI_CHECK(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, w.comm));
    if (auto nccl = make_nccl_collective(devices, id, w.group.rank * local, w.group.size * local))
      return nccl;
    throw Error("NCCL over MPI: a device reporting backend 'cuda' is not a CUDA device");
  }
#endif
  return std::make_unique<MpiHostCollective>(devices, w.comm, w.group.size);
}

}  // namespace

ProcessGroup join_process_group() {
  if (launched_process_count() <= 1) return {};
  ProcessGroup group = world().group;
  if (group.size > 1) group.collective = &make_process_collective;
  return group;
}

std::vector<Device*> process_devices(const std::vector<Device*>& listed, bool listed_by_user,
                                     const ProcessGroup& group) {
  if (group.size <= 1 || listed.empty()) return listed;
  const size_t local = static_cast<size_t>(group.local_size);
  const size_t me = static_cast<size_t>(group.local_rank);
  std::vector<Device*> candidates = listed;
  if (!listed_by_user) {  // the default device's backend, one device per process
    const std::string backend = listed.front()->info().backend;
    std::vector<Device*> all = DeviceRegistry::global().device_list(backend + ":all");
    if (all.size() >= local) return {all[me]};
    candidates = {listed.front()};
  }
  if (candidates.size() % local == 0) {
    const size_t per = candidates.size() / local;
    return std::vector<Device*>(candidates.begin() + static_cast<long>(me * per),
                                candidates.begin() + static_cast<long>((me + 1) * per));
  }
  // One device for every process: the CPU (each process runs its own copy of the model on it),
  // or a GPU that launcher settings such as CUDA_VISIBLE_DEVICES make different in each process
  // (NCCL reports a GPU that really is shared).
  if (candidates.size() == 1) return candidates;
  std::string names;
  for (Device* d : candidates) names += (names.empty() ? "" : ",") + d->info().id();
  throw UsageError(std::to_string(local) + " processes on this machine cannot split the " +
                   std::to_string(candidates.size()) + " device(s) " + names +
                   ": list a multiple of " + std::to_string(local) +
                   " devices with --devices (or TRIDENT_DEVICES), e.g. one GPU per process");
}

void abort_process_group(const ProcessGroup& group, const std::string& message, int status,
                         std::ostream& err) {
  err << "trident (process " << group.rank << " of " << group.size << "): " << message
      << "\nstopping every process of the job\n";
  err.flush();
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this is for an MPI that does
}

}  // namespace trident
