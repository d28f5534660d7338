// A job of several processes, without starting any: which launcher the environment shows and
// when a process must refuse to train alone, each process's share of a device list, discovery
// that opens only that share (a fake GPU backend counts what it opens), and the message naming
// the settings the processes disagree on.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/error.h"
#include "trident/core/job.h"
#include "trident/core/registry.h"

using namespace trident;

namespace {

// Sets (or, with nullptr, removes) an environment variable for one scope.
class EnvOverride {
 public:
  EnvOverride(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = std::string(before);
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~EnvOverride() {
    if (before_) setenv(name_, before_->c_str(), 1); else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> before_;
};

// No launcher variable at all, whatever started the test binary.
struct NoLauncher {
  EnvOverride a{"OMPI_COMM_WORLD_SIZE", nullptr}, b{"OMPI_COMM_WORLD_RANK", nullptr},
      c{"PMI_SIZE", nullptr}, d{"PMI_RANK", nullptr}, e{"MV2_COMM_WORLD_SIZE", nullptr},
      f{"MV2_COMM_WORLD_RANK", nullptr}, g{"SLURM_STEP_NUM_TASKS", nullptr},
      h{"SLURM_PROCID", nullptr}, i{"PMIX_RANK", nullptr};
};

ProcessGroup group_of(int size, int rank, int local_size, int local_rank) {
  ProcessGroup group;
  group.size = size;
  group.rank = rank;
  group.local_size = local_size;
  group.local_rank = local_rank;
  return group;
}

// A GPU that runs nothing: a CPU device that says it is device `index` of `backend`.
class FakeGpu : public CpuDevice {
 public:
  FakeGpu(const std::string& backend, int index) : CpuDevice(index, 1, "fake GPU") {
    info_ = CpuDevice::info();
    info_.backend = backend;
    info_.type = "gpu";
    ++opened;
  }
  const DeviceInfo& info() const override { return info_; }
  static int opened;  // devices constructed: contexts a real GPU backend would have created

 private:
  DeviceInfo info_;
};
int FakeGpu::opened = 0;

// Four GPUs, discovered the way the CUDA backend discovers: only those the scope allows.
class FakeGpuBackend : public Backend {
 public:
  explicit FakeGpuBackend(std::string name = "fakegpu") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<std::unique_ptr<Device>> discover(std::string& why_none) override {
    return discover_in_scope(DiscoveryScope{}, why_none);
  }
  std::vector<std::unique_ptr<Device>> discover_in_scope(const DiscoveryScope& scope,
                                                         std::string& why_none) override {
    std::vector<std::unique_ptr<Device>> devices;
    for (int ordinal : scope.devices_to_open(name_, 4))
      devices.push_back(std::make_unique<FakeGpu>(name_, ordinal));
    if (devices.empty()) why_none = "none opened: " + scope.describe();
    return devices;
  }

 private:
  std::string name_;
};

std::vector<int> indices(const std::vector<Device*>& devices) {
  std::vector<int> out;
  for (Device* d : devices) out.push_back(d->info().index);
  return out;
}

}  // namespace

TEST_CASE("launcher: the environment shows which launcher started this process",
          "[launcher]") {
  NoLauncher none;
  CHECK_FALSE(detect_launcher().detected());
  SECTION("Open MPI") {
    EnvOverride size("OMPI_COMM_WORLD_SIZE", "4"), rank("OMPI_COMM_WORLD_RANK", "2");
    const LauncherInfo info = detect_launcher();
    CHECK(info.launcher == "Open MPI's mpirun");
    CHECK(info.size == 4);
    CHECK(info.rank == 2);
  }
  SECTION("Slurm's srun: the step's size, not the allocation's") {
    EnvOverride batch_script("SLURM_NTASKS", "8");  // a batch script sees this too: ignored
    CHECK_FALSE(detect_launcher().detected());
    EnvOverride size("SLURM_STEP_NUM_TASKS", "8"), rank("SLURM_PROCID", "5");
    const LauncherInfo info = detect_launcher();
    CHECK(info.launcher == "Slurm's srun");
    CHECK(info.size == 8);
    CHECK(info.rank == 5);
    CHECK(info.variable == "SLURM_STEP_NUM_TASKS=8");
  }
  SECTION("PMIx announces only the rank") {
    EnvOverride rank("PMIX_RANK", "3");
    const LauncherInfo info = detect_launcher();
    CHECK(info.detected());
    CHECK(info.size == 0);
    CHECK(info.rank == 3);
  }
  SECTION("PMI and MVAPICH2") {
    {
      EnvOverride size("PMI_SIZE", "2");
      CHECK(detect_launcher().size == 2);
    }
    EnvOverride size("MV2_COMM_WORLD_SIZE", "3");
    CHECK(detect_launcher().size == 3);
  }
}

TEST_CASE("launcher: a process that cannot join the others refuses to train alone",
          "[launcher]") {
  LauncherInfo srun;
  srun.launcher = "Slurm's srun";
  srun.variable = "SLURM_STEP_NUM_TASKS=4";
  srun.size = 4;
  srun.rank = 1;
  LauncherInfo pmix;
  pmix.launcher = "a PMIx launcher";
  pmix.variable = "PMIX_RANK=2";
  pmix.rank = 2;
  // No launcher, or a job of one: nothing to refuse.
  CHECK(launcher_refusal(LauncherInfo{}, 0).empty());
  LauncherInfo one = srun;
  one.size = 1;
  CHECK(launcher_refusal(one, 0).empty());
  // A build without MPI, started as one of several or of an unknown number.
  CHECK_THAT(launcher_refusal(srun, 0), Catch::Contains("SLURM_STEP_NUM_TASKS=4") &&
                                            Catch::Contains("without MPI") &&
                                            Catch::Contains("train alone"));
  CHECK_THAT(launcher_refusal(pmix, 0), Catch::Contains("PMIX_RANK=2") &&
                                            Catch::Contains("does not say how many"));
  // With MPI: the launcher and MPI must see the same job.
  CHECK(launcher_refusal(srun, 4).empty());
  CHECK_THAT(launcher_refusal(srun, 1), Catch::Contains("MPI sees a job of 1") &&
                                            Catch::Contains("--mpi=pmix"));
  CHECK_THAT(launcher_refusal(pmix, 1), Catch::Contains("as rank 2"));
  CHECK(launcher_refusal(pmix, 3).empty());
}

TEST_CASE("launcher: each process's share of a device list, by name", "[launcher]") {
  const ProcessGroup second_of_two = group_of(4, 3, 2, 1);  // 2 machines, 2 processes each
  CHECK(*process_device_names("cuda:0,cuda:1,cuda:2,cuda:3", second_of_two) ==
        std::vector<std::string>{"cuda:2", "cuda:3"});
  CHECK(*process_device_names("cuda:0,opencl:1", second_of_two) ==
        std::vector<std::string>{"opencl:1"});
  CHECK(*process_device_names("cpu:0", second_of_two) == std::vector<std::string>{"cpu:0"});
  CHECK_FALSE(process_device_names("cuda:all", second_of_two));  // only discovery knows
  CHECK_FALSE(process_device_names("cuda", second_of_two));
  CHECK_THROWS_WITH(process_device_names("cuda:0,cuda:1,cuda:2", second_of_two),
                    Catch::Contains("cannot split the 3 device(s)"));
  CHECK(process_device_names("cuda:0,cuda:1,cuda:2", group_of(1, 0, 1, 0))->size() == 3);
}

TEST_CASE("launcher: discovery opens only this process's devices", "[launcher][registry]") {
  SECTION("no launcher: every device") {
    const DiscoveryScope scope = process_discovery_scope(std::nullopt, group_of(1, 0, 1, 0));
    CHECK_FALSE(scope.limited);
    CHECK(scope.devices_to_open("cuda", 3) == std::vector<int>{0, 1, 2});
  }
  SECTION("no device list: device local_rank of a backend with one per process") {
    const DiscoveryScope scope = process_discovery_scope(std::nullopt, group_of(8, 5, 4, 1));
    CHECK(scope.devices_to_open("cuda", 4) == std::vector<int>{1});
    // One GPU visible to each process (CUDA_VISIBLE_DEVICES), or fewer than processes: all.
    CHECK(scope.devices_to_open("cuda", 1) == std::vector<int>{0});
    CHECK(scope.devices_to_open("cuda", 2) == std::vector<int>{0, 1});
  }
  SECTION("a device list: this process's share, and no device of another backend") {
    const DiscoveryScope scope =
        process_discovery_scope(std::string("cuda:0,cuda:1,cuda:2,cuda:3"), group_of(2, 1, 2, 1));
    CHECK(scope.devices_to_open("cuda", 4) == std::vector<int>{2, 3});
    CHECK(scope.devices_to_open("opencl", 3).empty());
    CHECK_THAT(scope.describe(), Catch::Contains("cuda:2,cuda:3"));
    const DiscoveryScope all =
        process_discovery_scope(std::string("cuda:all"), group_of(2, 1, 2, 1));
    CHECK(all.devices_to_open("cuda", 4) == std::vector<int>{0, 1, 2, 3});
    CHECK(all.devices_to_open("opencl", 2).empty());
  }
  SECTION("the registry creates only the allowed devices, under their machine-wide numbers") {
    FakeGpu::opened = 0;
    DeviceRegistry registry(
        process_discovery_scope(std::string("fakegpu:0,fakegpu:1,fakegpu:2,fakegpu:3"),
                                group_of(2, 1, 2, 1)));
    registry.add_backend(std::make_unique<FakeGpuBackend>());
    CHECK(FakeGpu::opened == 2);  // not 4: no context on the other process's GPUs
    CHECK(indices(registry.device_list("fakegpu:2,fakegpu:3")) == std::vector<int>{2, 3});
    CHECK(indices(registry.device_list("fakegpu:all")) == std::vector<int>{2, 3});
    CHECK_THROWS_WITH(registry.device("fakegpu:0"),
                      Catch::Contains("no device 'fakegpu:0'") &&
                          Catch::Contains("opens only its share"));
    // And the process's devices come out of it by name.
    const ProcessGroup group = group_of(2, 1, 2, 1);
    CHECK(indices(process_devices(registry, std::string("fakegpu:0,fakegpu:1,fakegpu:2,fakegpu:3"),
                                  group)) == std::vector<int>{2, 3});
  }
  SECTION("without a list, each process's default device is its own GPU") {
    EnvOverride backend("TRIDENT_BACKEND", "fakegpu");  // the default backend's devices
    for (int local_rank : {0, 3}) {
      FakeGpu::opened = 0;
      const ProcessGroup group = group_of(4, local_rank, 4, local_rank);
      DeviceRegistry registry(process_discovery_scope(std::nullopt, group));
      registry.add_backend(std::make_unique<FakeGpuBackend>());
      CHECK(FakeGpu::opened == 1);
      CHECK(indices(process_devices(registry, std::nullopt, group)) ==
            std::vector<int>{local_rank});
    }
  }
  SECTION("without a list, a backend that will not give the default device opens nothing") {
    const ProcessGroup group = group_of(2, 1, 2, 1);
    {
      EnvOverride unset("TRIDENT_BACKEND", nullptr);  // the first backend with devices
      FakeGpu::opened = 0;
      DeviceRegistry registry(process_discovery_scope(std::nullopt, group));
      registry.add_backend(std::make_unique<FakeGpuBackend>("fakegpu"));
      registry.add_backend(std::make_unique<FakeGpuBackend>("othergpu"));  // as OpenCL after CUDA
      CHECK(FakeGpu::opened == 1);
      CHECK(registry.device_list("fakegpu:all").size() == 1);
      CHECK_THROWS_AS(registry.device_list("othergpu:all"), DeviceNotFound);
    }
    EnvOverride chosen("TRIDENT_BACKEND", "othergpu");
    FakeGpu::opened = 0;
    DeviceRegistry registry(process_discovery_scope(std::nullopt, group));
    registry.add_backend(std::make_unique<FakeGpuBackend>("fakegpu"));
    registry.add_backend(std::make_unique<FakeGpuBackend>("othergpu"));
    CHECK(FakeGpu::opened == 1);
    CHECK(indices(process_devices(registry, std::nullopt, group)) == std::vector<int>{1});
    CHECK(process_devices(registry, std::nullopt, group)[0]->info().backend == "othergpu");
  }
  SECTION("one process: every device, as before") {
    FakeGpu::opened = 0;
    DeviceRegistry registry;
    registry.add_backend(std::make_unique<FakeGpuBackend>());
    CHECK(FakeGpu::opened == 4);
    CHECK(registry.device("fakegpu:3").info().index == 3);
  }
}

TEST_CASE("launcher: settings that differ between processes are named with every value",
          "[launcher][settings]") {
  JobSettings base;
  base.devices_per_process = 1;
  base.global_batch = 200;
  base.bucket_bytes = 16 << 20;
  base.model = settings_hash("cnn");
  std::vector<JobSettings> same(3, base);
  CHECK(settings_disagreement(same).empty());
  std::vector<JobSettings> differ = same;
  differ[1].global_batch = 100;
  differ[2].bucket_bytes = 1 << 20;
  const std::string message = settings_disagreement(differ);
  CHECK_THAT(message, Catch::Contains("--batch: 100 on process 1; 200 on processes 0,2"));
  CHECK_THAT(message, Catch::Contains("TRIDENT_BUCKET_MB (in bytes): 1048576 on process 2; "
                                      "16777216 on processes 0,1"));
  CHECK_THAT(message, !Catch::Contains("--seed"));
  CHECK(settings_hash("cnn") != settings_hash("mlp"));
  CHECK(settings_hash("cnn") == settings_hash(std::string("c") + "nn"));
  // Sent as a flat array and back, field for field.
  JobSettings round = base;
  round.resumed_step = 1234;
  round.optimizer = settings_hash("adam");
  const std::vector<int64_t> values = job_settings_values(round);
  REQUIRE(values.size() == static_cast<size_t>(kJobSettingCount));
  CHECK(job_settings_values(job_settings_from_values(values.data())) == values);
}
