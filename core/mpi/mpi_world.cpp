// The MPI side of a job: joining it, waits for the other processes that give up after
// TRIDENT_COLLECTIVE_TIMEOUT_S, the settings every process must share, ending the whole job
// after a failure, and the choice of the cross-process collective (through the backends'
// registered hooks: core includes no backend's header).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <thread>

#include "trident/core/env.h"
#include "trident/core/mpi/mpi_internal.h"

namespace trident::mpi {

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw BackendError(std::string("MPI call ") + call + " failed: " + std::string(text, length) +
                     " at " + file + ":" + std::to_string(line));
}

namespace {

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string process_text(const ProcessGroup& group) {
  return "process " + std::to_string(group.rank) + " of " + std::to_string(group.size);
}

// Replaces `bytes` on every process with process 0's (two bounded broadcasts: size, then bytes).
void broadcast_from_first(std::string& bytes) {
  World& w = world();
  const double timeout = collective_timeout_seconds();
  int64_t size = static_cast<int64_t>(bytes.size());
  MPI_Request request = MPI_REQUEST_NULL;
  TRIDENT_MPI_CHECK(MPI_Ibcast(&size, 1, MPI_INT64_T, 0, w.comm, &request));
  wait_or_time_out(request, timeout, "in the bootstrap broadcast", "before the first step");
  bytes.resize(static_cast<size_t>(size));
  if (size == 0) return;
  if (size > (int64_t(1) << 30))
    throw Error("bootstrap broadcast of " + std::to_string(size) + " bytes");
  TRIDENT_MPI_CHECK(
      MPI_Ibcast(bytes.data(), static_cast<int>(size), MPI_BYTE, 0, w.comm, &request));
  wait_or_time_out(request, timeout, "in the bootstrap broadcast", "before the first step");
}

// Called by every process at the same point (the trainer's constructor).
std::unique_ptr<Collective> make_collective_across_processes(const std::vector<Device*>& devices) {
  const World& w = world();
  ProcessChannel channel;
  channel.rank = w.group.rank;
  channel.size = w.group.size;
  channel.min_over_processes = [](const std::vector<int64_t>& values) {
    return min_over_processes(values, "while choosing the collective");
  };
  channel.broadcast_from_first = &broadcast_from_first;
  // TRIDENT_MPI_NCCL=0: host staging and MPI even where the backend has its own (NCCL).
  return make_process_collective(devices, channel, env_flag("TRIDENT_MPI_NCCL", true),
                                 &make_mpi_host_collective);
}

}  // namespace

World& world() {
  static World* w = [] {
    auto* created = new World();  // lives until exit, like the device registry
    int initialized = 0;
    TRIDENT_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      // Only the main thread calls MPI; replicas' and watchdogs' threads never do.
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

void wait_or_time_out(MPI_Request& request, double timeout_s, const std::string& what,
                      const std::string& when) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  for (long polls = 1;; ++polls) {
    int done = 0;
    TRIDENT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (polls % 64 != 0) continue;  // the clock every 64 tests: progress first
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s)
      throw CollectiveTimeout(
          process_text(world().group) + " waited " + std::to_string(static_cast<long>(waited)) +
          " s for the other processes " + what + " " + when +
          collective_timeout_text(timeout_s) +
          ": one of them has stopped, died or fallen far behind");
    // A wait past 10 ms is a peer far behind (the leader evaluating, a stalled process): poll
    // gently. Shorter waits spin, as blocking MPI does, since each test drives progress.
    if (waited > 0.01) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::vector<int64_t> min_over_processes(const std::vector<int64_t>& values,
                                        const std::string& what) {
  std::vector<int64_t> least = values;
  MPI_Request request = MPI_REQUEST_NULL;
  TRIDENT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, least.data(), static_cast<int>(least.size()),
                                   MPI_INT64_T, MPI_MIN, world().comm, &request));
  wait_or_time_out(request, collective_timeout_seconds(), what, "before the first step");
  return least;
}

}  // namespace trident::mpi

namespace trident {

ProcessGroup join_process_group() {
  const LauncherInfo launcher = detect_launcher();
  if (!launcher.detected() || launcher.size == 1) return {};
  ProcessGroup group = mpi::world().group;
  const std::string refusal = launcher_refusal(launcher, group.size);
  if (!refusal.empty()) throw UsageError(refusal);
  if (group.size > 1) group.collective = &mpi::make_collective_across_processes;
  return group;
}

void agree_on_settings(const ProcessGroup& group, const JobSettings& mine) {
  if (group.size <= 1) return;
  const std::vector<int64_t> values = job_settings_values(mine);
  std::vector<int64_t> all(values.size() * static_cast<size_t>(group.size));
  MPI_Request request = MPI_REQUEST_NULL;
  TRIDENT_MPI_CHECK(MPI_Iallgather(values.data(), kJobSettingCount, MPI_INT64_T, all.data(),
                                   kJobSettingCount, MPI_INT64_T, mpi::world().comm, &request));
  mpi::wait_or_time_out(request, collective_timeout_seconds(), "while comparing settings",
                        "before the first step");
  std::vector<JobSettings> by_rank;
  for (int rank = 0; rank < group.size; ++rank)
    by_rank.push_back(job_settings_from_values(all.data() + rank * kJobSettingCount));
  const std::string disagreement = settings_disagreement(by_rank);
  if (!disagreement.empty()) throw UsageError(disagreement);
}

void abort_process_group(const ProcessGroup& group, const std::string& message, int status,
                         std::ostream& err) {
  err << "trident (" << mpi::process_text(group) << "): " << message
      << "\nstopping every process of the job\n";
  err.flush();
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this is for an MPI that does
}

}  // namespace trident
