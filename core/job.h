// A training job of one or several processes, as far as it can be known without MPI: which
// launcher started this process, each process's share of the devices (decided before discovery,
// so that a process opens no other GPU), and the settings every process must share.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trident/core/collective.h"
#include "trident/core/registry.h"

namespace trident {

struct ProcessGroup {
  int size = 1, rank = 0;              // processes in the job, and this one's place among them
  int local_size = 1, local_rank = 0;  // the same, counting only this machine's processes
  // The collective over this process's devices and every other process's (the backend's own,
  // NCCL, when every device is a CUDA GPU; else host staging plus MPI); unset for one process.
  std::function<std::unique_ptr<Collective>(const std::vector<Device*>&)> collective;
  bool leader() const { return rank == 0; }  // the one process that prints and saves
};

// ---- launchers -------------------------------------------------------------------------------
// What the environment says about the launcher that started this process, read before MPI is
// initialised: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), PMI launchers such as MPICH's mpiexec
// and Intel MPI (PMI_SIZE), MVAPICH2 (MV2_COMM_WORLD_SIZE), Slurm's srun (SLURM_STEP_NUM_TASKS,
// set for a job step only, unlike SLURM_NTASKS which a batch script sees too), and PMIx launchers
// that announce only the rank (PMIX_RANK).
struct LauncherInfo {
  std::string launcher;  // "Open MPI's mpirun", "Slurm's srun" ...; empty: none
  std::string variable;  // the variable that showed it, for messages
  int size = 0;          // processes it started; 0: it does not say
  int rank = -1;         // this process's rank; -1: it does not say
  bool detected() const { return !launcher.empty(); }
};
LauncherInfo detect_launcher();

// Why this process must not train: it was started as one of several but cannot join them
// (`mpi_size`: the job size MPI reports; 0 in a build without MPI), so it would train alone.
// Empty when it may go on.
std::string launcher_refusal(const LauncherInfo& launcher, int mpi_size);

// ---- each process's devices ----------------------------------------------------------------
// This process's share of a device list (the --devices / TRIDENT_DEVICES text) by name, among
// the processes of this machine: a list of k * local_size names gives each process k
// consecutive ones; a single name is every process's (the CPU, or one GPU per process made
// visible by CUDA_VISIBLE_DEVICES). nullopt when only discovery knows the list's length (an
// item such as "cuda:all" or "cuda"). Other lengths are a UsageError.
std::optional<std::vector<std::string>> process_device_names(const std::string& list,
                                                             const ProcessGroup& group);
// The same split of devices already found (the fallback for "cuda:all").
std::vector<Device*> split_devices(const std::vector<Device*>& listed, const ProcessGroup& group);
// What discovery may open in this process (see DiscoveryScope): its share of `list`, or with no
// list, device local_rank of each backend that has one per process. Unlimited for one process.
DiscoveryScope process_discovery_scope(const std::optional<std::string>& list,
                                       const ProcessGroup& group);
// This process's devices from `registry`: its share of `list`, or with no list (nullopt), its
// default backend's device local_rank where the backend has one per process, else the default
// device (which the processes then share).
std::vector<Device*> process_devices(const DeviceRegistry& registry,
                                     const std::optional<std::string>& list,
                                     const ProcessGroup& group);

// ---- settings --------------------------------------------------------------------------------
// What every process of a job must share before its first step: the settings that decide the
// sequence and size of the collectives (a difference hangs the job or corrupts gradients) and
// those that decide the model trained (a difference trains something else, silently). Strings
// and floats enter as settings_hash values.
struct JobSettings {
  int64_t devices_per_process = 0;
  int64_t global_batch = 0;
  int64_t average_every = 0;  // --sync average:K; 0: gradient all-reduce every step
  int64_t overlap = 0;        // 1: gradient sums in buckets during backward (TRIDENT_OVERLAP)
  int64_t bucket_bytes = 0;   // TRIDENT_BUCKET_MB, in bytes
  int64_t seed = 0;
  int64_t resumed_step = 0;   // the global step training starts from (--resume)
  int64_t epochs = 0;
  int64_t train_samples = 0;  // --train-limit and the data set
  int64_t model = 0;          // settings_hash(--model)
  int64_t optimizer = 0;      // settings_hash of --optimizer, --lr, --momentum, --weight-decay
};
constexpr int kJobSettingCount = 11;
// The fields in declaration order, for sending; and back.
std::vector<int64_t> job_settings_values(const JobSettings& settings);
JobSettings job_settings_from_values(const int64_t* values);
// FNV-1a of `text`, the same on every machine.
int64_t settings_hash(const std::string& text);
// For processes 0, 1, ... (one JobSettings each): a message naming every setting that differs
// and each process's value ("--batch: 200 on process 0; 100 on process 1"), or empty.
std::string settings_disagreement(const std::vector<JobSettings>& by_rank);

}  // namespace trident
