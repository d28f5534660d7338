// Launcher detection, each process's share of the devices, and the comparison of the settings
// the processes of a job must share.
#include "trident/core/job.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident {

namespace {

struct KnownLauncher {
  const char* name;
  const char* size_variable;  // nullptr: the launcher announces no size
  const char* rank_variable;
};
// In the order they are believed: a launcher's own variables first, Slurm's step size after
// (mpirun inside a Slurm allocation leaves SLURM_* of the allocation in the environment).
constexpr KnownLauncher kLaunchers[] = {
    {"Open MPI's mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
    {"a PMI launcher (MPICH's mpiexec, Intel MPI, srun --mpi=pmi2)", "PMI_SIZE", "PMI_RANK"},
    {"MVAPICH2's launcher", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"},
    {"Slurm's srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"},
    {"a PMIx launcher (prterun, srun --mpi=pmix)", nullptr, "PMIX_RANK"},
};

// A non-negative integer, or -1 when unset or not one.
int env_count(const char* name) {
  const char* text = name ? std::getenv(name) : nullptr;
  if (!text || !*text) return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 && value < (1L << 30) ? static_cast<int>(value) : -1;
}

bool is_named_device(const std::string& item) {  // "cuda:1", not "cuda" nor "cuda:all"
  const auto colon = item.find(':');
  if (colon == std::string::npos || colon + 1 >= item.size()) return false;
  for (size_t i = colon + 1; i < item.size(); ++i)
    if (item[i] < '0' || item[i] > '9') return false;
  return true;
}

UsageError cannot_split(size_t count, const std::string& names, const ProcessGroup& group) {
  const std::string local = std::to_string(group.local_size);
  return UsageError(local + " processes on this machine cannot split the " +
                    std::to_string(count) + " device(s) " + names + ": list a multiple of " +
                    local + " devices with --devices (or TRIDENT_DEVICES), e.g. one GPU per " +
                    "process");
}

template <typename T>
std::vector<T> share_of(const std::vector<T>& items, const ProcessGroup& group, bool& ok) {
  ok = true;
  const size_t local = static_cast<size_t>(group.local_size);
  const size_t me = static_cast<size_t>(group.local_rank);
  if (group.size <= 1 || items.empty()) return items;
  if (items.size() % local == 0) {
    const size_t per = items.size() / local;
    return std::vector<T>(items.begin() + static_cast<long>(me * per),
                          items.begin() + static_cast<long>((me + 1) * per));
  }
  // One device for every process: the CPU (each process runs its own copy of the model on it),
  // or a GPU that launcher settings such as CUDA_VISIBLE_DEVICES make different in each process
  // (NCCL reports a GPU that really is shared).
  if (items.size() == 1) return items;
  ok = false;
  return {};
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ",") + item;
  return text;
}

}  // namespace

LauncherInfo detect_launcher() {
  for (const KnownLauncher& known : kLaunchers) {
    const int size = env_count(known.size_variable);
    const int rank = env_count(known.rank_variable);
    if (size < 0 && rank < 0) continue;
    LauncherInfo info;
    info.launcher = known.name;
    info.variable = size >= 0 ? std::string(known.size_variable) + "=" + std::to_string(size)
                              : std::string(known.rank_variable) + "=" + std::to_string(rank);
    info.size = std::max(size, 0);
    info.rank = rank;
    return info;
  }
  return {};
}

std::string launcher_refusal(const LauncherInfo& launcher, int mpi_size) {
  if (!launcher.detected() || launcher.size == 1) return "";
  const std::string started = "started by " + launcher.launcher + " (" + launcher.variable + ")";
  const std::string alone = ": every process would train alone";
  if (mpi_size == 0) {
    const std::string fix = ". Rebuild with -DTRIDENT_WITH_MPI=ON (libopenmpi-dev), or run one "
                            "process with --devices listing several devices.";
    if (launcher.size > 1)
      return started + " as one of " + std::to_string(launcher.size) +
             " processes, but this trident was built without MPI" + alone + fix;
    return started + ", which does not say how many processes the job has, and this trident "
                     "was built without MPI to ask" + alone + fix;
  }
  const bool contradicts = launcher.size > 1 ? mpi_size != launcher.size
                                             : mpi_size == 1 && launcher.rank > 0;
  if (!contradicts) return "";
  return started + (launcher.size > 1 ? " as one of " + std::to_string(launcher.size) +
                                            " processes"
                                      : " as rank " + std::to_string(launcher.rank)) +
         ", but MPI sees a job of " + std::to_string(mpi_size) +
         " (the launcher and the MPI library trident was built with did not connect)" + alone +
         ". Start it with the launcher of that MPI (mpirun), or with Slurm pick the matching "
         "plugin (srun --mpi=pmix or --mpi=pmi2).";
}

std::optional<std::vector<std::string>> process_device_names(const std::string& list,
                                                             const ProcessGroup& group) {
  const std::vector<std::string> items = split(list, ',');
  for (const std::string& item : items)
    if (!is_named_device(item)) return std::nullopt;
  bool ok = true;
  std::vector<std::string> mine = share_of(items, group, ok);
  if (!ok) throw cannot_split(items.size(), join(items), group);
  return mine;
}

std::vector<Device*> split_devices(const std::vector<Device*>& listed, const ProcessGroup& group) {
  bool ok = true;
  std::vector<Device*> mine = share_of(listed, group, ok);
  if (ok) return mine;
  std::vector<std::string> names;
  for (Device* d : listed) names.push_back(d->info().id());
  throw cannot_split(listed.size(), join(names), group);
}

DiscoveryScope process_discovery_scope(const std::optional<std::string>& list,
                                       const ProcessGroup& group) {
  DiscoveryScope scope;
  if (group.size <= 1) return scope;
  scope.limited = true;
  scope.local_rank = group.local_rank;
  scope.local_size = group.local_size;
  if (!list) return scope;
  scope.listed = true;
  if (auto names = process_device_names(*list, group)) {
    for (const std::string& name : *names) {
      const auto colon = name.find(':');
      scope.only[name.substr(0, colon)].push_back(std::stoi(name.substr(colon + 1)));
    }
  } else {  // "cuda:all" or "cuda": the backends named open all, the others none
    for (const std::string& item : split(*list, ','))
      scope.only[item.substr(0, item.find(':'))] = {DiscoveryScope::kAll};
  }
  return scope;
}

std::vector<Device*> process_devices(const DeviceRegistry& registry,
                                     const std::optional<std::string>& list,
                                     const ProcessGroup& group) {
  if (group.size <= 1)
    return list ? registry.device_list(*list) : std::vector<Device*>{&registry.default_device()};
  if (list) {
    if (auto names = process_device_names(*list, group)) return registry.device_list(join(*names));
    return split_devices(registry.device_list(*list), group);
  }
  // The default backend, one device per process when it has that many; in a limited scope the
  // registry holds just this process's one, and the default device is it.
  Device& fallback = registry.default_device();
  const std::vector<Device*> all = registry.device_list(fallback.info().backend + ":all");
  if (all.size() >= static_cast<size_t>(group.local_size))
    return {all[static_cast<size_t>(group.local_rank)]};
  return {&fallback};
}

// ---- settings --------------------------------------------------------------------------------

std::vector<int64_t> job_settings_values(const JobSettings& s) {
  return {s.devices_per_process, s.global_batch, s.average_every, s.overlap,
          s.bucket_bytes,        s.seed,         s.resumed_step,  s.epochs,
          s.train_samples,       s.model,        s.optimizer};
}

JobSettings job_settings_from_values(const int64_t* v) {
  JobSettings s;
  s.devices_per_process = v[0];
  s.global_batch = v[1];
  s.average_every = v[2];
  s.overlap = v[3];
  s.bucket_bytes = v[4];
  s.seed = v[5];
  s.resumed_step = v[6];
  s.epochs = v[7];
  s.train_samples = v[8];
  s.model = v[9];
  s.optimizer = v[10];
  return s;
}

int64_t settings_hash(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return static_cast<int64_t>(hash >> 1);  // non-negative: prints plainly
}

std::string settings_disagreement(const std::vector<JobSettings>& by_rank) {
  static const char* const kNames[kJobSettingCount] = {
      "devices per process (--devices / TRIDENT_DEVICES)",
      "--batch",
      "--sync (0: allreduce, K: average:K)",
      "TRIDENT_OVERLAP (gradient sums during backward, as far as the collective allows)",
      "TRIDENT_BUCKET_MB (in bytes)",
      "--seed",
      "the step training resumes from (--resume --checkpoint)",
      "--epochs",
      "training samples (--train-limit, --data)",
      "--model (hashed)",
      "--optimizer, --lr, --momentum, --weight-decay (hashed)"};
  std::vector<std::vector<int64_t>> values;
  for (const JobSettings& s : by_rank) values.push_back(job_settings_values(s));
  std::string message;
  for (int field = 0; field < kJobSettingCount; ++field) {
    std::map<int64_t, std::vector<size_t>> ranks_by_value;
    for (size_t rank = 0; rank < values.size(); ++rank)
      ranks_by_value[values[rank][static_cast<size_t>(field)]].push_back(rank);
    if (ranks_by_value.size() <= 1) continue;
    message += std::string("\n  ") + kNames[field] + ":";
    for (const auto& [value, ranks] : ranks_by_value) {
      message += " " + std::to_string(value) + " on process" + (ranks.size() > 1 ? "es " : " ");
      for (size_t i = 0; i < ranks.size() && i < 8; ++i)
        message += (i ? "," : "") + std::to_string(ranks[i]);
      if (ranks.size() > 8) message += ",... (" + std::to_string(ranks.size()) + " in all)";
      message += ";";
    }
    message.pop_back();
  }
  if (message.empty()) return "";
  return "the processes of this job were started with different settings (give every process "
         "the same options, and forward environment variables with mpirun -x):" + message;
}

}  // namespace trident
