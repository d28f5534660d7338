// Data parallelism on CPU devices (TRIDENT_CPU_DEVICES=2 gives two oneTBB arenas): the collective
// itself, device-list errors, checkpoints moving between device counts, and the trainer's
// multi-process hooks (two "processes" simulated by two threads sharing a collective), the
// bucketed gradient sums overlapping backward (through a host-staged collective that claims to
// overlap), and teardown and failure paths (tests/fake_collective.h). The N-device equivalence
// and model-averaging checks live in conformance_training.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include "trident/core/collective.h"
#include "trident/core/error.h"
#include "trident/core/mpi/process_group.h"
#include "trident/core/registry.h"
#include "trident/models/cli.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/fake_collective.h"
#include "tests/reference_device.h"

#ifdef TRIDENT_HAVE_NCCL
namespace trident {
std::unique_ptr<Collective> make_nccl_collective(const std::vector<Device*>& devices);
}
#endif
#include "tests/test_data.h"

using namespace trident;

namespace trident {
std::unique_ptr<Backend> make_cpu_backend();
}

namespace {

// A registry of `count` CPU devices splitting the cores (its own, not the global one).
std::unique_ptr<DeviceRegistry> cpu_registry(int count) {
  setenv("TRIDENT_CPU_DEVICES", std::to_string(count).c_str(), 1);
  // Each CPU device needs a thread of its own: more devices than cores must say so.
  const bool oversubscribe = !std::getenv("TRIDENT_NUM_THREADS") &&
                             static_cast<unsigned>(count) > std::thread::hardware_concurrency();
  if (oversubscribe) setenv("TRIDENT_NUM_THREADS", std::to_string(count).c_str(), 1);
  auto registry = std::make_unique<DeviceRegistry>();
  registry->add_backend(make_cpu_backend());
  unsetenv("TRIDENT_CPU_DEVICES");
  if (oversubscribe) unsetenv("TRIDENT_NUM_THREADS");
  return registry;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("trident_dp_" + name)).string();
}

double relative_max_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// TrainOptions plus the built-in model the test trains.
struct TestOptions : TrainOptions {
  std::string model = "mlp";
};
ModelFactory model_of(const TestOptions& o) { return find_model(o.model).factory(); }

TestOptions small_options(const std::string& model) {
  TestOptions o;
  o.model = model;
  o.batch = 100;
  return o;
}

// Sums across the threads that share it, as MPI_Allreduce sums across processes: each party
// first sums its own devices' buffers, then waits until every party has added its part.
struct ThreadRendezvous {
  explicit ThreadRendezvous(int parties) : parties(parties) {}
  std::vector<float> reduce(const std::vector<float>& part) {
    std::unique_lock<std::mutex> lock(mutex);
    const int generation_at_entry = generation;
    if (arrived == 0) sum.assign(part.size(), 0.0f);
    for (size_t k = 0; k < part.size(); ++k) sum[k] += part[k];
    if (++arrived == parties) {
      result = sum;
      arrived = 0;
      ++generation;
      done.notify_all();
    } else {
      done.wait(lock, [&] { return generation != generation_at_entry; });
    }
    ++calls;
    return result;
  }
  const int parties;
  std::mutex mutex;
  std::condition_variable done;
  int arrived = 0, generation = 0, calls = 0;
  std::vector<float> sum, result;
};

class ThreadGroupCollective : public Collective {
 public:
  ThreadGroupCollective(std::vector<Device*> devices, ThreadRendezvous& rendezvous, bool capturable,
                        bool overlaps = false)
      : devices_(std::move(devices)), rendezvous_(rendezvous), capturable_(capturable),
        overlaps_(overlaps) {}
  std::string name() const override { return "threads"; }
  bool capturable() const override { return capturable_; }
  // Claimed only to lead the trainer into its bucketed path; a start is a whole sum (default).
  bool overlaps() const override { return overlaps_; }
  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    const size_t n = static_cast<size_t>(count);
    std::vector<float> local(n, 0.0f), part(n);
    for (size_t d = 0; d < devices_.size(); ++d) {
      devices_[d]->copy_to_host(part.data(), buffers[d], n * sizeof(float));
      for (size_t k = 0; k < n; ++k) local[k] += part[k];
    }
    const std::vector<float> total = rendezvous_.reduce(local);
    for (size_t d = 0; d < devices_.size(); ++d)
      devices_[d]->copy_from_host(buffers[d], total.data(), n * sizeof(float));
  }

 private:
  std::vector<Device*> devices_;
  ThreadRendezvous& rendezvous_;
  bool capturable_, overlaps_;
};

// Host staging behind the bucketed interface, claiming to overlap so that the trainer takes its
// bucketed path on CPU devices; records every started range (of the first device's buffer).
class RecordingBucketCollective : public Collective {
 public:
  struct Start {
    DeviceMemory memory;
    int64_t count;
  };
  explicit RecordingBucketCollective(const std::vector<Device*>& devices)
      : host_(make_host_staged_collective(devices)) {}
  std::string name() const override { return "host, in buckets"; }
  bool overlaps() const override { return true; }
  void all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    host_->all_reduce_sum(buffers, count);
  }
  void start_all_reduce_sum(const std::vector<DeviceMemory>& buffers, int64_t count) override {
    starts.push_back({buffers.at(0), count});
    host_->all_reduce_sum(buffers, count);
  }
  void finish_all_reduces() override { ++finishes; }
  std::vector<Start> starts;
  int64_t finishes = 0;

 private:
  std::unique_ptr<Collective> host_;
};

// Trains `epochs` epochs as `processes` simulated processes (one thread each, `per_process`
// devices each); returns process 0's weights and epoch losses.
struct GroupRun {
  std::vector<float> weights;
  std::vector<double> losses;
  std::vector<std::vector<float>> all_weights;  // every process's
  int reduce_calls = 0;                         // sums across the processes, all counted
};
GroupRun train_as_processes(const std::vector<Device*>& devices, int processes, TestOptions o,
                            int epochs, const DatasetSplits& data, bool capturable,
                            bool overlaps = false) {
  ThreadRendezvous rendezvous(processes);
  const size_t per_process = devices.size() / static_cast<size_t>(processes);
  GroupRun run;
  run.all_weights.resize(static_cast<size_t>(processes));
  std::vector<std::vector<double>> losses(static_cast<size_t>(processes));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(processes));
  std::vector<std::thread> threads;
  for (int p = 0; p < processes; ++p)
    threads.emplace_back([&, p] {
      try {
        TestOptions mine = o;
        mine.process_count = processes;
        mine.process_rank = p;
        mine.collective = [&](const std::vector<Device*>& local) {
          return std::unique_ptr<Collective>(
              new ThreadGroupCollective(local, rendezvous, capturable, overlaps));
        };
        std::vector<Device*> local(devices.begin() + static_cast<long>(p * per_process),
                                   devices.begin() + static_cast<long>((p + 1) * per_process));
        Trainer trainer(local, model_of(mine), data, mine);
        for (int e = 0; e < epochs; ++e) losses[size_t(p)].push_back(trainer.train_epoch().train_loss);
        run.all_weights[size_t(p)] = trainer.network().parameters().to_host();
      } catch (...) {
        errors[size_t(p)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  run.weights = run.all_weights[0];
  run.losses = losses[0];
  run.reduce_calls = rendezvous.calls;
  for (int p = 1; p < processes; ++p) CHECK(losses[size_t(p)] == losses[0]);
  return run;
}

// The CUDA devices of the global registry (none in a build or on a machine without them).
std::vector<Device*> cuda_devices() {
  for (const auto& backend : DeviceRegistry::global().backends())
    if (backend.name == "cuda" && !backend.devices.empty())
      return DeviceRegistry::global().device_list("cuda:all");
  return {};
}

// Sets an environment variable for one scope, restoring what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* before = std::getenv(name);
    had_ = before != nullptr;
    if (had_) before_ = before;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, before_.c_str(), 1); else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string before_;
};

// TRIDENT_OVERLAP=0 (for timing comparisons) turns the bucketed sum off.
bool overlap_allowed_by_env() {
  const char* overlap = std::getenv("TRIDENT_OVERLAP");
  return !overlap || std::string(overlap) != "0";
}

// NCCL is optional (TRIDENT_WITH_NCCL): without it CUDA device sets sum through host memory,
// which neither captures nor overlaps backward.
#ifdef TRIDENT_HAVE_NCCL
constexpr bool kBuiltWithNccl = true;
#else
constexpr bool kBuiltWithNccl = false;
#endif

// Bound on weights after a few steps: float32 rounding amplified by training, larger with TF32.
double gpu_weight_bound() {
  const char* tf32 = std::getenv("TRIDENT_CUDA_TF32");  // the CUDA backend's switch
  return tf32 && std::string(tf32) == "1" ? 5e-2 : 1e-3;
}

}  // namespace

TEST_CASE("data parallel: NCCL sums across CUDA devices", "[data-parallel][collective][cuda]") {
  const std::vector<Device*> gpus = cuda_devices();
  if (gpus.size() < 2) {
    WARN("SKIPPED: fewer than 2 CUDA devices");
    return;
  }
  if (!kBuiltWithNccl) {
    WARN("SKIPPED: built without NCCL");
    return;
  }
  auto collective = make_collective(gpus);
  INFO("collective " << collective->name());
  CHECK(collective->name().rfind("nccl", 0) == 0);  // register_nccl_collective() was called
  CHECK(collective->capturable());
  const int64_t n = 1 << 20;
  std::vector<Tensor> buffers;
  std::vector<float> want(static_cast<size_t>(n), 0.0f);
  for (size_t d = 0; d < gpus.size(); ++d) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) values[size_t(k)] = float((k * 7 + int64_t(d) * 3) % 101) - 50.0f;
    for (int64_t k = 0; k < n; ++k) want[size_t(k)] += values[size_t(k)];
    buffers.push_back(Tensor::from_host(*gpus[d], {n}, values));
  }
  std::vector<DeviceMemory> tail;  // a bucket: the second half only
  for (auto& b : buffers) tail.push_back(b.memory().at(size_t(n / 2) * sizeof(float)));
  collective->all_reduce_sum(tail, n / 2);
  std::vector<DeviceMemory> whole;
  for (auto& b : buffers) whole.push_back(b.memory());
  collective->all_reduce_sum(whole, n / 2);  // then the first half
  for (auto& b : buffers) CHECK(b.to_host() == want);  // small integers: exact in any order
}

// One GPU, one rank: the NCCL paths a single-GPU machine can run (issue 14). The communicator sums
// in place (the identity for one rank), its all-reduce is recorded inside a captured step and
// replayed, and the graph is released before the communicator, as Trainer's teardown does
// (NCCL's finalize waits for every graph that holds the communicator: the other order hangs).
TEST_CASE("data parallel: a 1-rank NCCL communicator sums on one GPU, inside a captured step too, "
          "and tears down after the graph", "[data-parallel][collective][cuda]") {
#ifndef TRIDENT_HAVE_NCCL
  WARN("SKIPPED: built without NCCL");
#else
  const std::vector<Device*> gpus = cuda_devices();
  if (gpus.empty()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  Device& gpu = *gpus[0];
  std::unique_ptr<Collective> collective = make_nccl_collective({&gpu});
  REQUIRE(collective);
  CHECK(collective->name().rfind("nccl", 0) == 0);
  REQUIRE(collective->capturable());
  const int64_t n = 4096;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) values[size_t(k)] = float(k % 97) - 48.0f;
  const Tensor buffer = Tensor::from_host(gpu, {n}, values);
  const Tensor ones = Tensor::from_host(gpu, {n}, std::vector<float>(size_t(n), 1.0f));
  collective->all_reduce_sum({buffer.memory()}, n);
  CHECK(buffer.to_host() == values);
  std::unique_ptr<CapturedWork> captured = gpu.capture([&] {
    gpu.axpby(ones, buffer, 1.0f, 1.0f);  // buffer += 1
    collective->all_reduce_sum({buffer.memory()}, n);
  });
  REQUIRE(captured);
  for (int i = 0; i < 3; ++i) captured->replay();
  std::vector<float> want = values;
  for (float& v : want) v += 3.0f;
  CHECK(buffer.to_host() == want);
  captured.reset();    // the graph first ...
  collective.reset();  // ... then the communicator: returns (a hang here is the bug)
  CHECK(buffer.to_host() == want);
#endif
}

TEST_CASE("data parallel: NCCL bucketed sums run beside later work and join before the update",
          "[data-parallel][collective][cuda]") {
  const std::vector<Device*> gpus = cuda_devices();
  if (gpus.size() < 2) {
    WARN("SKIPPED: fewer than 2 CUDA devices");
    return;
  }
  if (!kBuiltWithNccl) {
    WARN("SKIPPED: built without NCCL");
    return;
  }
  auto collective = make_collective(gpus);
  CHECK(collective->overlaps());
  const int64_t n = 1 << 22;
  std::vector<Tensor> buffers, others;
  std::vector<float> want(static_cast<size_t>(n), 0.0f);
  for (size_t d = 0; d < gpus.size(); ++d) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k)
      values[size_t(k)] = float((k * 5 + int64_t(d) * 7) % 97) - 48.0f;
    for (int64_t k = 0; k < n; ++k) want[size_t(k)] += values[size_t(k)];
    buffers.push_back(Tensor::from_host(*gpus[d], {n}, values));
    others.push_back(Tensor::zeros(*gpus[d], {n}));
  }
  auto range = [&](int64_t begin) {
    std::vector<DeviceMemory> memory;
    for (auto& b : buffers) memory.push_back(b.memory().at(size_t(begin) * sizeof(float)));
    return memory;
  };
  for (int round = 0; round < 2; ++round) {  // the streams and events are reused
    std::vector<float> expected = want;
    if (round == 1)
      for (float& v : expected) v *= float(gpus.size());  // the sum of identical sums
    collective->start_all_reduce_sum(range(n / 2), n - n / 2);  // the tail first, as backward
    for (size_t d = 0; d < gpus.size(); ++d)  // other work on the compute stream meanwhile
      gpus[d]->fill(others[d], float(round + 1));
    collective->start_all_reduce_sum(range(0), n / 2);
    collective->finish_all_reduces();
    for (size_t d = 0; d < gpus.size(); ++d) {
      CHECK(buffers[d].to_host() == expected);  // small integers: exact in any order
      CHECK(others[d].to_host() == std::vector<float>(size_t(n), float(round + 1)));
    }
  }
  collective->finish_all_reduces();  // nothing started: nothing to join
}

TEST_CASE("data parallel: N CUDA devices equal one at the same global batch",
          "[data-parallel][cuda]") {
  const std::vector<Device*> gpus = cuda_devices();
  if (gpus.size() < 2) {
    WARN("SKIPPED: fewer than 2 CUDA devices");
    return;
  }
  const std::vector<Device*> pair{gpus[0], gpus[1]};
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      const TestOptions o = small_options(model);
      Trainer one({gpus[0]}, model_of(o), data, o);
      const double one_loss = one.train_epoch().train_loss;
      Trainer two(pair, model_of(o), data, o);
      // NCCL: gradient buckets summed during backward.
      CHECK(two.overlaps_backward() == (overlap_allowed_by_env() && kBuiltWithNccl));
      const double two_loss = two.train_epoch().train_loss;
      INFO("collective " << two.collective_name());
      const double err = relative_max_error(two.network().parameters().to_host(),
                                            one.network().parameters().to_host());
      INFO("max weight difference relative to the largest weight: " << err);
      CHECK(err < gpu_weight_bound());
      CHECK(two_loss == Approx(one_loss).epsilon(1e-3));
    }
  }
}

TEST_CASE("data parallel: on CUDA devices gradient buckets equal one sum after backward",
          "[data-parallel][cuda][overlap]") {
  const std::vector<Device*> gpus = cuda_devices();
  if (gpus.size() < 2) {
    WARN("SKIPPED: fewer than 2 CUDA devices");
    return;
  }
  if (!kBuiltWithNccl) {
    WARN("SKIPPED: built without NCCL");
    return;
  }
  if (!overlap_allowed_by_env()) {
    WARN("SKIPPED: TRIDENT_OVERLAP=0");
    return;
  }
  const std::vector<Device*> pair{gpus[0], gpus[1]};
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      TestOptions o = small_options(model);
      o.overlap = false;
      Trainer once(pair, model_of(o), data, o);
      REQUIRE_FALSE(once.overlaps_backward());
      const double once_loss = once.train_epoch().train_loss;
      o.overlap = true;
      o.bucket_bytes = 1;  // a bucket per layer with parameters
      Trainer buckets(pair, model_of(o), data, o);
      REQUIRE(buckets.overlaps_backward());
      const double buckets_loss = buckets.train_epoch().train_loss;
      // Two ranks: every element is a + b either way; only a missed dependency could differ.
      const double err = relative_max_error(buckets.network().parameters().to_host(),
                                            once.network().parameters().to_host());
      INFO("max weight difference relative to the largest weight: " << err);
      CHECK(err < 1e-6);
      CHECK(buckets_loss == Approx(once_loss).epsilon(1e-6));
    }
  }
}

TEST_CASE("data parallel: the host-staged collective sums across several devices",
          "[data-parallel][collective]") {
  auto registry = cpu_registry(3);
  const std::vector<Device*> devices = registry->all_devices();
  REQUIRE(devices.size() == 3);
  auto collective = make_collective(devices);
  CHECK(collective->name() == "host");
  CHECK_FALSE(collective->capturable());

  const int64_t n = 1000;
  std::vector<Tensor> buffers;
  std::vector<float> want(static_cast<size_t>(n), 0.0f);
  for (size_t d = 0; d < devices.size(); ++d) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k)
      values[size_t(k)] = float(d + 1) * 0.5f + float(k % 17) - float(d * k % 5);
    for (int64_t k = 0; k < n; ++k) want[size_t(k)] += values[size_t(k)];
    buffers.push_back(Tensor::from_host(*devices[d], {n}, values));
  }
  SECTION("whole buffers") {
    std::vector<DeviceMemory> memory;
    for (auto& b : buffers) memory.push_back(b.memory());
    collective->all_reduce_sum(memory, n);
    for (auto& b : buffers) CHECK(b.to_host() == want);
  }
  SECTION("a sub-range, as a gradient bucket would be: the rest is untouched") {
    std::vector<std::vector<float>> before;
    std::vector<DeviceMemory> memory;
    for (auto& b : buffers) {
      before.push_back(b.to_host());
      memory.push_back(b.memory().at(100 * sizeof(float)));
    }
    collective->all_reduce_sum(memory, 300);
    for (size_t d = 0; d < buffers.size(); ++d) {
      const std::vector<float> got = buffers[d].to_host();
      for (int64_t k = 0; k < n; ++k) {
        const bool inside = k >= 100 && k < 400;
        if (got[size_t(k)] != (inside ? want[size_t(k)] : before[d][size_t(k)])) {
          FAIL("device " << d << " element " << k << ": " << got[size_t(k)]);
        }
      }
    }
  }
  SECTION("a buffer count that does not match the devices is an error") {
    CHECK_THROWS_AS(collective->all_reduce_sum({buffers[0].memory()}, n), Error);
  }
  SECTION("one device needs no collective; no device is an error") {
    auto single = make_collective({devices[0]});
    CHECK(single->capturable());
    const std::vector<float> before = buffers[0].to_host();
    single->all_reduce_sum({buffers[0].memory()}, n);
    CHECK(buffers[0].to_host() == before);
    CHECK_THROWS_AS(make_collective({}), Error);
  }
}

TEST_CASE("data parallel: a backend's registered collective is preferred, host staging otherwise",
          "[data-parallel][collective]") {
  auto registry = cpu_registry(2);
  const std::vector<Device*> devices = registry->all_devices();
  static int made = 0;
  register_collective_factory("cpu", [](const std::vector<Device*>& d) {
    ++made;
    return make_host_staged_collective(d);
  });
  CHECK(make_collective(devices)->name() == "host");
  CHECK(made == 1);
  // A factory that declines (returns nothing) leaves the host-staged fallback.
  register_collective_factory("cpu", [](const std::vector<Device*>&) {
    return std::unique_ptr<Collective>();
  });
  CHECK(make_collective(devices)->name() == "host");
}

TEST_CASE("data parallel: unknown and duplicate devices are errors that list what exists",
          "[data-parallel][devices]") {
  auto registry = cpu_registry(2);
  CHECK(registry->device_list("cpu:0,cpu:1").size() == 2);
  CHECK(registry->device_list("cpu:all").size() == 2);
  CHECK_THROWS_WITH(registry->device_list("cpu:0,cpu:2"),
                    Catch::Contains("cpu:2") && Catch::Contains("cpu:1"));
  CHECK_THROWS_WITH(registry->device_list("cpu:1,cpu:1"), Catch::Contains("named twice"));
  CHECK_THROWS_WITH(registry->device_list("cpu:0,cpu:all"), Catch::Contains("named twice"));
  CHECK_THROWS_WITH(registry->device_list("gpu:0"), Catch::Contains("unknown backend 'gpu'"));
  CHECK_THROWS_AS(registry->device_list("cpu:0,"), DeviceNotFound);
  CHECK_THROWS_AS(registry->device_list("cpu:x"), DeviceNotFound);

  // The CLI reports the same errors with status 2 (a name that names nothing here: README, "The
  // CLI"), naming what exists.
  std::ostringstream out, err;
  CHECK(run_cli({"train", "--devices", "cpu:0,cpu:0", "--train-limit", "200"}, out, err) == 2);
  CHECK_THAT(err.str(), Catch::Contains("named twice"));
  std::ostringstream out2, err2;
  CHECK(run_cli({"train", "--devices", "cpu:0,opencl:9"}, out2, err2) == 2);
  CHECK_THAT(err2.str(), Catch::Contains("cpu:0"));
}

TEST_CASE("data parallel: a 2-device checkpoint loads on 1 device and the reverse",
          "[data-parallel][checkpoint]") {
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  REQUIRE(pair.size() == 2);
  const DatasetSplits data = trident::testing::small_splits(600, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      const TestOptions o = small_options(model);
      const std::string from_two = temp_path(model + "_two.safetensors");
      const std::string from_one = temp_path(model + "_one.safetensors");
      // The uninterrupted reference: 2 epochs on one device.
      Trainer reference({pair[0]}, model_of(o), data, o);
      reference.train_epoch();
      reference.save_checkpoint(from_one);
      reference.train_epoch();
      const std::vector<float> want = reference.network().parameters().to_host();

      // 1 epoch on 2 devices, saved; resumed on 1 device for the second epoch.
      {
        Trainer two(pair, model_of(o), data, o);
        two.train_epoch();
        two.save_checkpoint(from_two);
      }
      Trainer resumed_on_one({pair[1]}, model_of(o), data, o);
      resumed_on_one.load_checkpoint(from_two);
      CHECK(resumed_on_one.epochs_done() == 1);
      CHECK(resumed_on_one.global_step() == 6);
      resumed_on_one.train_epoch();
      CHECK(relative_max_error(resumed_on_one.network().parameters().to_host(), want) < 1e-4);

      // 1 epoch on 1 device, resumed on 2 devices: both replicas get the weights and momentum.
      Trainer resumed_on_two(pair, model_of(o), data, o);
      resumed_on_two.load_checkpoint(from_one);
      resumed_on_two.train_epoch();
      CHECK(relative_max_error(resumed_on_two.network().parameters().to_host(), want) < 1e-4);
      std::filesystem::remove(from_two);
      std::filesystem::remove(from_one);
    }
  }
}

TEST_CASE("data parallel: two processes of one device each equal one device (trainer hooks)",
          "[data-parallel][processes]") {
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  REQUIRE(pair.size() == 2);
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    for (const bool capturable : {false, true}) {
      DYNAMIC_SECTION(model << (capturable ? ", all-reduce inside the recorded step"
                                           : ", all-reduce between steps")) {
        const TestOptions o = small_options(model);
        Trainer one({pair[0]}, model_of(o), data, o);
        std::vector<double> one_losses;
        for (int e = 0; e < 2; ++e) one_losses.push_back(one.train_epoch().train_loss);
        const GroupRun two = train_as_processes(pair, 2, o, 2, data, capturable);
        CHECK(relative_max_error(two.weights, one.network().parameters().to_host()) < 1e-4);
        CHECK(two.all_weights[1] == two.all_weights[0]);  // every process holds the same model
        for (size_t e = 0; e < one_losses.size(); ++e)
          CHECK(two.losses[e] == Approx(one_losses[e]).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("data parallel: two processes of two devices each, and averaging across processes",
          "[data-parallel][processes]") {
  auto registry = cpu_registry(4);
  const std::vector<Device*> four = registry->all_devices();
  REQUIRE(four.size() == 4);
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  TestOptions o = small_options("mlp");
  o.optimizer.momentum = 0.0f;
  Trainer one({four[0]}, model_of(o), data, o);
  one.train_epoch();
  const std::vector<float> want = one.network().parameters().to_host();
  const GroupRun reduce = train_as_processes(four, 2, o, 1, data, false);
  CHECK(relative_max_error(reduce.weights, want) < 1e-4);
  // Averaging every step with plain SGD is the all-reduce, across processes too.
  o.average_every = 1;
  const GroupRun average = train_as_processes(four, 2, o, 1, data, false);
  CHECK(relative_max_error(average.weights, want) < 1e-4);
  CHECK(average.all_weights[1] == average.all_weights[0]);
  // A batch the 4 replicas cannot split is refused before anything runs.
  o.batch = 102;
  CHECK_THROWS_WITH(train_as_processes(four, 2, o, 1, data, false), Catch::Contains("multiple"));
}

TEST_CASE("data parallel: gradient sums started in buckets during backward equal one sum after it",
          "[data-parallel][overlap]") {
  ScopedEnv overlap_on("TRIDENT_OVERLAP", "1");
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  REQUIRE(pair.size() == 2);
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  // (model, layers with parameters): a bucket per such layer when buckets are tiny.
  for (const auto& [model, parameter_layers] :
       std::vector<std::pair<std::string, size_t>>{{"mlp", 2}, {"cnn", 4}}) {
    for (const int64_t bucket_bytes : {int64_t(1), int64_t(1) << 30}) {
      DYNAMIC_SECTION(model << ", buckets of " << bucket_bytes << " bytes or more") {
        TestOptions o = small_options(model);
        Trainer plain(pair, model_of(o), data, o);  // host staging: one sum after backward, a thread per device
        CHECK_FALSE(plain.overlaps_backward());
        std::vector<double> plain_losses;
        for (int e = 0; e < 2; ++e) plain_losses.push_back(plain.train_epoch().train_loss);

        RecordingBucketCollective* recorder = nullptr;
        o.bucket_bytes = bucket_bytes;
        o.collective = [&](const std::vector<Device*>& devices) {
          auto made = std::make_unique<RecordingBucketCollective>(devices);
          recorder = made.get();
          return std::unique_ptr<Collective>(std::move(made));
        };
        Trainer bucketed(pair, model_of(o), data, o);
        REQUIRE(bucketed.overlaps_backward());
        std::vector<double> bucketed_losses;
        for (int e = 0; e < 2; ++e) bucketed_losses.push_back(bucketed.train_epoch().train_loss);
        // The same float sums of the same gradients, only started earlier: bit for bit equal.
        CHECK(bucketed.network().parameters().to_host() == plain.network().parameters().to_host());
        CHECK(bucketed_losses == plain_losses);

        // Every step: buckets from the buffer's tail down that cover it once, then one join.
        const int64_t steps = bucketed.global_step();
        REQUIRE(recorder != nullptr);
        CHECK(recorder->finishes == steps);
        const size_t per_step = bucket_bytes == 1 ? parameter_layers : 1;
        REQUIRE(recorder->starts.size() == per_step * static_cast<size_t>(steps));
        const DeviceMemory grads = bucketed.network().gradients().memory();
        const size_t total = static_cast<size_t>(bucketed.network().parameter_count()) * 4;
        for (size_t s = 0; s < static_cast<size_t>(steps); ++s) {
          size_t end = grads.offset + total;
          for (size_t b = 0; b < per_step; ++b) {
            const RecordingBucketCollective::Start& start = recorder->starts[s * per_step + b];
            INFO("step " << s << ", bucket " << b);
            CHECK(start.memory.handle == grads.handle);
            CHECK(start.memory.offset + static_cast<size_t>(start.count) * 4 == end);
            end = start.memory.offset;
          }
          CHECK(end == grads.offset);
        }
      }
    }
  }
}

TEST_CASE("data parallel: the bucketed sum can be turned off, and needs the per-step all-reduce",
          "[data-parallel][overlap]") {
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  TestOptions o = small_options("mlp");
  o.collective = [](const std::vector<Device*>& devices) {
    return std::unique_ptr<Collective>(new RecordingBucketCollective(devices));
  };
  {
    ScopedEnv env_on("TRIDENT_OVERLAP", "1");
    CHECK(Trainer(pair, model_of(o), data, o).overlaps_backward());
  }
  CHECK_FALSE(Trainer({pair[0]}, model_of(o), data, o).overlaps_backward());  // nothing to sum
  TestOptions off = o;
  off.overlap = false;
  CHECK_FALSE(Trainer(pair, model_of(off), data, off).overlaps_backward());
  TestOptions averaging = o;
  averaging.average_every = 2;
  CHECK_FALSE(Trainer(pair, model_of(averaging), data, averaging).overlaps_backward());
  ScopedEnv env_off("TRIDENT_OVERLAP", "0");
  CHECK_FALSE(Trainer(pair, model_of(o), data, o).overlaps_backward());
}

TEST_CASE("data parallel: bucketed sums across processes equal one sum (trainer hooks)",
          "[data-parallel][processes][overlap]") {
  ScopedEnv overlap_on("TRIDENT_OVERLAP", "1");
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  REQUIRE(pair.size() == 2);
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    for (const bool capturable : {false, true}) {
      DYNAMIC_SECTION(model << (capturable ? ", buckets inside the recorded step"
                                           : ", buckets in an eager step")) {
        TestOptions o = small_options(model);
        o.bucket_bytes = 1;  // a bucket per layer with parameters
        const GroupRun once = train_as_processes(pair, 2, o, 2, data, capturable, false);
        const GroupRun buckets = train_as_processes(pair, 2, o, 2, data, capturable, true);
        CHECK(buckets.weights == once.weights);
        CHECK(buckets.all_weights[1] == buckets.all_weights[0]);
        CHECK(buckets.losses == once.losses);
        CHECK(buckets.reduce_calls > once.reduce_calls);  // more, smaller sums
      }
    }
  }
}

TEST_CASE("data parallel: devices are split among the processes of one machine",
          "[data-parallel][launcher]") {
  auto registry = cpu_registry(4);
  const std::vector<Device*> four = registry->all_devices();
  ProcessGroup group;
  group.size = 4;
  group.rank = 3;
  group.local_size = 2;
  group.local_rank = 1;
  CHECK(split_devices(four, group) == std::vector<Device*>{four[2], four[3]});
  CHECK(split_devices({four[0], four[1]}, group) == std::vector<Device*>{four[1]});
  CHECK(split_devices({four[0]}, group) == std::vector<Device*>{four[0]});  // a shared CPU
  CHECK_THROWS_AS(split_devices({four[0], four[1], four[2]}, group), UsageError);
  ProcessGroup alone;
  CHECK(split_devices(four, alone) == four);
}

// A trainer of one local device in a "job" of two processes (the other a mirror of this one),
// with a collective that checks the teardown order, on a CPU device that captures steps.
struct TeardownRig {
  explicit TeardownRig(const std::string& model) : device(0) {
    options = small_options(model);
    options.process_count = 2;
    options.collective = [this](const std::vector<Device*>& devices) {
      return std::unique_ptr<Collective>(
          new trident::testing::TeardownCheckingCollective(devices, 2, report));
    };
  }
  trident::testing::CapturingCpuDevice device;
  trident::testing::TeardownReport report;
  TestOptions options;
};

TEST_CASE("data parallel: captured steps are released before the collective they hold",
          "[data-parallel][teardown]") {
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      TeardownRig rig(model);
      {
        Trainer trainer({&rig.device}, model_of(rig.options), data, rig.options);
        trainer.train_epoch();
        // The second step was captured with its all-reduce inside, as on a GPU under mpirun.
        REQUIRE(rig.device.captures == 1);
        REQUIRE(rig.report.recorded_sums == 1);
        CHECK_FALSE(rig.report.destroyed);
      }
      CHECK(rig.report.destroyed);
      CHECK(rig.report.recordings_alive_at_destruction == 0);  // NCCL's finalize would hang
      CHECK_FALSE(rig.report.aborted);  // an orderly end finalizes; it does not abort
      CHECK_FALSE(rig.report.finalize_would_hang());
    }
  }
}

TEST_CASE("data parallel: a trainer unwinding from a failure aborts its collective first",
          "[data-parallel][teardown]") {
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  for (const int64_t failing_step : {int64_t(1), int64_t(3)}) {  // before and after the capture
    DYNAMIC_SECTION("a failure at step " << failing_step) {
      TeardownRig rig("mlp");
      try {
        Trainer trainer({&rig.device}, model_of(rig.options), data, rig.options);
        trainer.train_epoch(
            [&](const Progress&) {
              if (trainer.global_step() < failing_step) return;
              rig.report.peers_gone = true;  // and the other ranks will never match anything
              throw Error("simulated failure");
            },
            0.0);
        FAIL("the failure did not propagate");
      } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("simulated failure"));
      }
      CHECK(rig.report.destroyed);
      CHECK(rig.report.aborted);  // before its destruction: nothing may wait for the peers
      CHECK(rig.report.recordings_alive_at_destruction == 0);
      CHECK_FALSE(rig.report.finalize_would_hang());
    }
  }
}

// A watchdog that gives up on the other ranks aborts the communicators, and the host's waits
// return over whatever the aborted sums left (2 H200s, a rank stopped with SIGSTOP: an epoch of
// "train loss 1309861248" was printed before the process ended). What the host reads after a
// failure must never be reported.
TEST_CASE("data parallel: results read after a collective failed are not reported",
          "[data-parallel][teardown]") {
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  const std::string failure = "watchdog: the queued work has not finished for 5 s";
  SECTION("an epoch's losses") {
    TeardownRig rig("mlp");
    Trainer trainer({&rig.device}, model_of(rig.options), data, rig.options);
    const int64_t steps = trainer.steps_per_epoch();
    CHECK_THROWS_WITH(trainer.train_epoch(
                          [&](const Progress& p) {
                            if (p.step == steps) rig.report.watchdog_failure = failure;
                          },
                          0.0),
                      Catch::Contains(failure));
  }
  SECTION("the test set's loss and accuracy") {
    TeardownRig rig("mlp");
    Trainer trainer({&rig.device}, model_of(rig.options), data, rig.options);
    trainer.train_epoch();
    CHECK_NOTHROW(trainer.evaluate());
    rig.report.watchdog_failure = failure;
    CHECK_THROWS_AS(trainer.evaluate(), CollectiveTimeout);
  }
}

TEST_CASE("data parallel: a backend's multi-process collective is chosen through its hook",
          "[data-parallel][collective]") {
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  static int first_rank_seen = -1, total_ranks_seen = -1;
  static std::string bootstrap_seen;
  register_process_collective_factory(
      "cpu", [](const std::vector<Device*>& devices, const BroadcastFromFirst& broadcast,
                int first_rank, int total_ranks) {
        std::string bytes = first_rank == 0 ? "made by the first process" : "";
        broadcast(bytes);
        bootstrap_seen = bytes;
        first_rank_seen = first_rank;
        total_ranks_seen = total_ranks;
        return make_host_staged_collective(devices);
      });
  // One process of a job of three, the second: its devices are ranks 2 and 3 of 6. The other
  // processes' values enter through the channel's minima.
  std::vector<int64_t> others;  // what the other processes contribute to each minimum
  ProcessChannel channel;
  channel.rank = 1;
  channel.size = 3;
  channel.min_over_processes = [&](const std::vector<int64_t>& mine) {
    std::vector<int64_t> least = mine;
    for (size_t i = 0; i < least.size() && i < others.size(); ++i)
      least[i] = std::min(least[i], others[i]);
    return least;
  };
  channel.broadcast_from_first = [](std::string& bytes) { bytes = "the first process's id"; };
  int fallbacks = 0;
  auto fallback = [&](const std::vector<Device*>& devices) {
    ++fallbacks;
    return make_host_staged_collective(devices);
  };
  SECTION("every process agrees: the backend's own") {
    make_process_collective(pair, channel, true, fallback);
    CHECK(fallbacks == 0);
    CHECK(first_rank_seen == 2);
    CHECK(total_ranks_seen == 6);
    CHECK(bootstrap_seen == "the first process's id");
  }
  SECTION("turned off here (TRIDENT_MPI_NCCL=0), or somewhere else: host staging") {
    make_process_collective(pair, channel, false, fallback);
    others = {2, -2, 0, INT64_MAX, INT64_MAX};  // another process turned it off
    make_process_collective(pair, channel, true, fallback);
    CHECK(fallbacks == 2);
  }
  SECTION("another process on another backend: host staging") {
    others = {2, -2, 1, 0, INT64_MAX};  // a different (smaller) backend id somewhere
    make_process_collective(pair, channel, true, fallback);
    CHECK(fallbacks == 1);
  }
  SECTION("device counts differ: an error naming them") {
    others = {1, -2, 1, INT64_MAX, INT64_MAX};
    CHECK_THROWS_WITH(make_process_collective(pair, channel, true, fallback),
                      Catch::Contains("same number of devices") &&
                          Catch::Contains("between 1 and 2"));
  }
  register_process_collective_factory("cpu", nullptr);
}

TEST_CASE("data parallel: a blocking collective call past its deadline is reported",
          "[data-parallel][timeout]") {
  std::mutex mutex;
  std::vector<std::string> reports;
  set_collective_failure_handler([&](const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex);
    reports.push_back(message);
  });
  {
    CollectiveDeadline quick(5.0, "a quick init");
  }
  {
    CollectiveDeadline slow(0.05, "init waited for rank 1");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  {
    CollectiveDeadline unlimited(0.0, "no limit");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  set_collective_failure_handler(nullptr);
  std::lock_guard<std::mutex> lock(mutex);
  REQUIRE(reports.size() == 1);
  CHECK_THAT(reports[0], Catch::Contains("init waited for rank 1") &&
                             Catch::Contains("TRIDENT_COLLECTIVE_TIMEOUT_S="));
}

TEST_CASE("data parallel: TRIDENT_COLLECTIVE_TIMEOUT_S", "[data-parallel][timeout]") {
  {
    ScopedEnv unset("TRIDENT_COLLECTIVE_TIMEOUT_S", "");
    CHECK(collective_timeout_seconds() == 600.0);
  }
  {
    ScopedEnv five("TRIDENT_COLLECTIVE_TIMEOUT_S", "5");
    CHECK(collective_timeout_seconds() == 5.0);
  }
  ScopedEnv bad("TRIDENT_COLLECTIVE_TIMEOUT_S", "soon");
  CHECK_THROWS_WITH(collective_timeout_seconds(), Catch::Contains("TRIDENT_COLLECTIVE_TIMEOUT_S"));
}

TEST_CASE("data parallel: with a per-device collective every device runs its own captured step "
          "on its own thread, and the run equals one device", "[data-parallel][per-device]") {
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      const TestOptions o = small_options(model);  // 8 steps of 100
      auto registry = cpu_registry(1);
      Trainer one({registry->all_devices()[0]}, model_of(o), data, o);
      const double one_loss = one.train_epoch().train_loss;
      trident::testing::ReplayingCpuDevice a(0), b(1);
      trident::testing::PerDeviceCollective* collective = nullptr;
      TestOptions two = o;
      two.collective = [&](const std::vector<Device*>& devices) {
        auto c = std::make_unique<trident::testing::PerDeviceCollective>(devices);
        collective = c.get();
        return std::unique_ptr<Collective>(std::move(c));
      };
      Trainer pair({&a, &b}, model_of(two), data, two);
      CHECK_THAT(pair.sync_description(), Catch::Contains("a captured step per device"));
      const double pair_loss = pair.train_epoch().train_loss;
      CHECK(a.captures == 1);  // step 1 eager, step 2 captured, the rest replayed
      CHECK(b.captures == 1);
      CHECK(*a.replays == 7);
      CHECK(collective->per_device_calls == 16);  // every step, every device
      CHECK(pair_loss == Approx(one_loss).epsilon(1e-5));
      CHECK(relative_max_error(pair.network().parameters().to_host(),
                               one.network().parameters().to_host()) < 1e-4);
    }
  }
}

TEST_CASE("data parallel: a per-device collective that overlaps gets its sums in buckets during "
          "each device's backward, and the run equals one device", "[data-parallel][per-device]") {
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      const TestOptions o = small_options(model);  // 8 steps of 100
      auto registry = cpu_registry(1);
      Trainer one({registry->all_devices()[0]}, model_of(o), data, o);
      const double one_loss = one.train_epoch().train_loss;
      trident::testing::ReplayingCpuDevice a(0), b(1);
      trident::testing::PerDeviceCollective* collective = nullptr;
      TestOptions two = o;
      two.bucket_bytes = 1;  // a bucket per layer with parameters
      two.collective = [&](const std::vector<Device*>& devices) {
        auto c = std::make_unique<trident::testing::PerDeviceCollective>(devices);
        c->overlapping = true;
        collective = c.get();
        return std::unique_ptr<Collective>(std::move(c));
      };
      Trainer pair({&a, &b}, model_of(two), data, two);
      CHECK_THAT(pair.sync_description(), Catch::Contains("in buckets during backward") &&
                                              Catch::Contains("a captured step per device"));
      const double pair_loss = pair.train_epoch().train_loss;
      CHECK(a.captures == 1);
      CHECK(*a.replays == 7);
      size_t layers_with_parameters = 0;
      for (size_t i = 0; i < pair.network().layer_count(); ++i)
        layers_with_parameters += pair.network().layer_parameters(i).count() > 0 ? 1 : 0;
      REQUIRE(layers_with_parameters > 1);
      // Every step, every device: a part per layer with parameters, and one join.
      CHECK(collective->per_device_calls == 16 * static_cast<int>(layers_with_parameters));
      CHECK(collective->finishes == 16);
      CHECK(pair_loss == Approx(one_loss).epsilon(1e-5));
      CHECK(relative_max_error(pair.network().parameters().to_host(),
                               one.network().parameters().to_host()) < 1e-4);
    }
  }
}

TEST_CASE("data parallel: an uneven batch split (devices of different speeds) trains the "
          "model one device trains at the same global batch", "[data-parallel][split]") {
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  auto registry = cpu_registry(2);
  const std::vector<Device*> pair = registry->all_devices();
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      TestOptions o = small_options(model);
      Trainer one({pair[0]}, model_of(o), data, o);
      const double one_loss = one.train_epoch().train_loss;
      o.split = {3.0, 1.0};
      Trainer uneven(pair, model_of(o), data, o);
      CHECK(uneven.batch_sizes() == std::vector<int64_t>{75, 25});
      const double uneven_loss = uneven.train_epoch().train_loss;
      CHECK(uneven_loss == Approx(one_loss).epsilon(1e-5));
      CHECK(relative_max_error(uneven.network().parameters().to_host(),
                               one.network().parameters().to_host()) < 1e-4);
      // Model averaging weights each replica by its share: averaging every step with plain SGD
      // is the same algorithm as the all-reduce.
      if (model == "mlp") {
        TestOptions averaging = o;
        averaging.optimizer.momentum = 0.0f;
        TestOptions reduce = averaging;
        averaging.average_every = 1;
        Trainer avg(pair, model_of(averaging), data, averaging);
        Trainer red(pair, model_of(reduce), data, reduce);
        avg.train_epoch();
        red.train_epoch();
        CHECK(relative_max_error(avg.network().parameters().to_host(),
                                 red.network().parameters().to_host()) < 1e-4);
      }
    }
  }
  TestOptions bad = small_options("mlp");
  bad.split = {1.0};
  CHECK_THROWS_WITH(Trainer(pair, model_of(bad), data, bad), Catch::Contains("1 shares for 2"));
  bad.split = {1.0, -1.0};
  CHECK_THROWS_WITH(Trainer(pair, model_of(bad), data, bad), Catch::Contains("positive"));
}

TEST_CASE("data parallel: split by speed leaves out a device that would make the set slower than "
          "its fastest device alone", "[data-parallel][split]") {
  // The float64 reference device is many times slower than the CPU backend: whether by its
  // share (under 1%) or by the set's timed step against the CPU's alone, it must not train.
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  auto registry = cpu_registry(1);
  trident::testing::ReferenceDevice slow;
  const std::vector<Device*> set = {registry->all_devices()[0], &slow};
  TestOptions o = small_options("mlp");
  o.split_by_speed = true;
  o.average_every = -1;
  Trainer trainer(set, model_of(o), data, o);
  INFO(trainer.balance_report());
  CHECK(trainer.batch_sizes() == std::vector<int64_t>{o.batch});
  CHECK_THAT(trainer.balance_report(), Catch::Contains("left out"));
  CHECK(std::isfinite(trainer.train_epoch().train_loss));
}
