// Tests of device selection: names to devices, the errors that list what exists, duplicates,
// `backend:all`, TRIDENT_BACKEND / TRIDENT_DEVICES, backends without devices, and env parsing.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "tests/reference_device.h"

using namespace trident;
using Catch::Matchers::Contains;

namespace trident {
std::unique_ptr<Backend> make_cpu_backend();
}

namespace {

// Sets (or unsets, with nullptr) an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1); else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A device that only has a name and a type (the selection rules never run an op).
class NamedDevice final : public testing::ReferenceDevice {
 public:
  NamedDevice(const std::string& backend, int index, const std::string& type)
      : ReferenceDevice(index, backend, type) {}
};

// A backend with the given device types ("gpu", "cpu"), or none with a reason, or one whose
// discovery throws.
class FakeBackend final : public Backend {
 public:
  FakeBackend(std::string name, std::vector<std::string> types, std::string why = "",
              bool throws = false)
      : name_(std::move(name)), types_(std::move(types)), why_(std::move(why)), throws_(throws) {}
  std::string name() const override { return name_; }
  std::vector<std::unique_ptr<Device>> discover(std::string& why_none) override {
    if (throws_) throw BackendError("driver exploded while counting devices");
    why_none = why_;
    std::vector<std::unique_ptr<Device>> out;
    for (size_t i = 0; i < types_.size(); ++i)
      out.push_back(std::make_unique<NamedDevice>(name_, int(i), types_[i]));
    return out;
  }

 private:
  std::string name_;
  std::vector<std::string> types_;
  std::string why_;
  bool throws_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DeviceNotFound& e) {
    return e.what();
  }
  FAIL("expected DeviceNotFound");
  return "";
}

}  // namespace

TEST_CASE("registry: the global registry has the cpu and says why a backend has no devices",
          "[registry]") {
  const DeviceRegistry& r = DeviceRegistry::global();
  size_t total = 0;
  bool has_cpu = false;
  for (const auto& b : r.backends()) {
    INFO("backend " << b.name);
    CHECK((b.devices.empty() ? !b.why_none.empty() : true));
    if (b.devices.empty()) WARN("backend " << b.name << " has no devices: " << b.why_none);
    for (size_t i = 0; i < b.devices.size(); ++i) {
      CHECK(b.devices[i]->info().backend == b.name);
      CHECK(b.devices[i]->info().index == int(i));
    }
    total += b.devices.size();
    has_cpu = has_cpu || (b.name == "cpu" && !b.devices.empty());
  }
  CHECK(has_cpu);
  CHECK(r.all_devices().size() == total);
  const std::string text = r.describe();
  for (const auto& b : r.backends()) CHECK_THAT(text, Contains(b.name + ": "));
  CHECK_THAT(text, Contains("cpu:0"));
  CHECK(&r.device("cpu") == &r.device("cpu:0"));
}

TEST_CASE("registry: unknown backend and device names are errors listing what exists",
          "[registry]") {
  const DeviceRegistry& r = DeviceRegistry::global();
  const std::string unknown = error_of([&] { r.device("vulkan:0"); });
  CHECK_THAT(unknown, Contains("unknown backend 'vulkan'"));
  CHECK_THAT(unknown, Contains("cpu"));
  CHECK_THAT(unknown, Contains("cpu:0"));  // the listing of devices that exist
  for (const char* bad : {"cpu:7", "cpu:x", "cpu:", "cpu:-1", "cpu:99999999999999999999"}) {
    INFO("name " << bad);
    const std::string message = error_of([&] { r.device(bad); });
    CHECK_THAT(message, Contains(std::string("no device '") + bad + "'"));
    CHECK_THAT(message, Contains("cpu:0"));
  }
  CHECK_THAT(error_of([&] { r.device_list("cpu:0,vulkan"); }), Contains("unknown backend"));
  CHECK_THAT(error_of([&] { r.device_list("cpu:0,"); }), Contains("empty name"));
  CHECK_THAT(error_of([&] { r.device_list("vulkan:all"); }), Contains("names no devices"));
}

TEST_CASE("registry: device lists, duplicates and backend:all", "[registry]") {
  ScopedEnv devices("TRIDENT_CPU_DEVICES", "3");
  ScopedEnv threads("TRIDENT_NUM_THREADS", "3");  // a device per thread: 3 threads even on 2 cores
  DeviceRegistry r;
  r.add_backend(make_cpu_backend());
  REQUIRE(r.all_devices().size() == 3);
  const std::vector<Device*> all = r.all_devices();
  CHECK(r.device_list("cpu:all") == all);
  CHECK(r.device_list(" cpu:2 , cpu:0") == std::vector<Device*>{all[2], all[0]});  // trimmed
  CHECK(r.device_list("cpu:1") == std::vector<Device*>{all[1]});
  CHECK_THAT(error_of([&] { r.device_list("cpu:0,cpu:0"); }), Contains("named twice"));
  CHECK_THAT(error_of([&] { r.device_list("cpu:1,cpu:all"); }), Contains("cpu:1 is named twice"));
  CHECK_THAT(error_of([&] { r.device_list("cpu,cpu:0"); }), Contains("named twice"));
  CHECK_THAT(error_of([&] { r.device("cpu:3"); }), Contains("has 3 device(s)"));
}

TEST_CASE("registry: default device prefers a CUDA GPU, then an OpenCL GPU, then the CPU",
          "[registry]") {
  ScopedEnv backend("TRIDENT_BACKEND", nullptr);
  ScopedEnv list("TRIDENT_DEVICES", nullptr);
  {
    DeviceRegistry r;
    r.add_backend(std::make_unique<FakeBackend>("cuda", std::vector<std::string>{"gpu", "gpu"}));
    r.add_backend(std::make_unique<FakeBackend>("opencl", std::vector<std::string>{"cpu", "gpu"}));
    r.add_backend(std::make_unique<FakeBackend>("cpu", std::vector<std::string>{"cpu"}));
    CHECK(r.default_device().info().id() == "cuda:0");
    CHECK(r.device("opencl").info().id() == "opencl:1");  // a backend's default: its first GPU
    CHECK(r.selected_devices() == std::vector<Device*>{&r.default_device()});
  }
  {
    DeviceRegistry r;
    r.add_backend(std::make_unique<FakeBackend>("cuda", std::vector<std::string>{}, "no driver"));
    r.add_backend(std::make_unique<FakeBackend>("opencl", std::vector<std::string>{"cpu", "gpu"}));
    r.add_backend(std::make_unique<FakeBackend>("cpu", std::vector<std::string>{"cpu"}));
    CHECK(r.default_device().info().id() == "opencl:1");
  }
  {
    DeviceRegistry r;
    r.add_backend(std::make_unique<FakeBackend>("opencl", std::vector<std::string>{"cpu"}));
    r.add_backend(std::make_unique<FakeBackend>("cpu", std::vector<std::string>{"cpu"}));
    CHECK(r.default_device().info().id() == "cpu:0");  // an OpenCL CPU device is not preferred
  }
}

TEST_CASE("registry: backends without devices report why; naming them is a clear error",
          "[registry]") {
  ScopedEnv list("TRIDENT_DEVICES", nullptr);
  ScopedEnv unset_backend("TRIDENT_BACKEND", nullptr);
  DeviceRegistry r;
  r.add_backend(std::make_unique<FakeBackend>("cuda", std::vector<std::string>{},
                                              "no NVIDIA driver found"));
  r.add_backend(std::make_unique<FakeBackend>("opencl", std::vector<std::string>{}, "", true));
  r.add_backend(std::make_unique<FakeBackend>("silent", std::vector<std::string>{}));
  r.add_backend(std::make_unique<FakeBackend>("cpu", std::vector<std::string>{"cpu"}));
  REQUIRE(r.backends().size() == 4);
  CHECK(r.backends()[0].why_none == "no NVIDIA driver found");
  CHECK_THAT(r.backends()[1].why_none, Contains("driver exploded"));  // discovery threw
  CHECK(r.backends()[2].why_none == "no devices found");
  CHECK_THAT(r.describe(), Contains("cuda: 0 devices (no NVIDIA driver found)"));
  CHECK_THAT(error_of([&] { r.device("cuda"); }), Contains("no NVIDIA driver found"));
  CHECK_THAT(error_of([&] { r.device("cuda:0"); }), Contains("no NVIDIA driver found"));
  CHECK_THAT(error_of([&] { r.device_list("cuda:all"); }), Contains("names no devices"));
  {
    ScopedEnv backend("TRIDENT_BACKEND", "cuda");
    const std::string message = error_of([&] { r.default_device(); });
    CHECK_THAT(message, Contains("backend 'cuda' has no devices (no NVIDIA driver found)"));
    CHECK_THAT(message, Contains("cpu:0"));
  }
  {
    ScopedEnv backend("TRIDENT_BACKEND", "metal");
    CHECK_THAT(error_of([&] { r.default_device(); }),
               Contains("TRIDENT_BACKEND='metal' names no backend") && Contains("cpu"));
  }
  {
    ScopedEnv backend("TRIDENT_BACKEND", "cpu");
    CHECK(r.default_device().info().id() == "cpu:0");
  }
  CHECK(r.default_device().info().id() == "cpu:0");  // unset: the best present
  DeviceRegistry empty;
  CHECK_THAT(error_of([&] { empty.default_device(); }), Contains("no device available"));
}

TEST_CASE("registry: TRIDENT_DEVICES selects a list", "[registry]") {
  ScopedEnv split("TRIDENT_CPU_DEVICES", "2");
  DeviceRegistry r;
  r.add_backend(make_cpu_backend());
  const std::vector<Device*> all = r.all_devices();
  REQUIRE(all.size() == 2);
  {
    ScopedEnv list("TRIDENT_DEVICES", "cpu:1,cpu:0");
    CHECK(r.selected_devices() == std::vector<Device*>{all[1], all[0]});
  }
  {
    ScopedEnv list("TRIDENT_DEVICES", "cpu:all");
    CHECK(r.selected_devices() == all);
  }
  {
    ScopedEnv list("TRIDENT_DEVICES", "cpu:0,cpu:0");
    CHECK_THAT(error_of([&] { r.selected_devices(); }), Contains("named twice"));
  }
  {
    ScopedEnv list("TRIDENT_DEVICES", nullptr);
    ScopedEnv backend("TRIDENT_BACKEND", nullptr);
    CHECK(r.selected_devices() == std::vector<Device*>{all[0]});
  }
}

TEST_CASE("env: integers, flags and lists are parsed strictly", "[registry][env]") {
  {
    ScopedEnv v("TRIDENT_TEST_INT", nullptr);
    CHECK(env_int("TRIDENT_TEST_INT", 7, 1, 10) == 7);
    CHECK_FALSE(env_string("TRIDENT_TEST_INT").has_value());
  }
  {
    ScopedEnv v("TRIDENT_TEST_INT", "");  // empty counts as unset
    CHECK(env_int("TRIDENT_TEST_INT", 7, 1, 10) == 7);
  }
  {
    ScopedEnv v("TRIDENT_TEST_INT", "4");
    CHECK(env_int("TRIDENT_TEST_INT", 7, 1, 10) == 4);
  }
  for (const char* bad : {"12x", "abc", "11", "0", "-3", " "}) {
    ScopedEnv v("TRIDENT_TEST_INT", bad);
    INFO("value '" << bad << "'");
    CHECK_THROWS_AS(env_int("TRIDENT_TEST_INT", 7, 1, 10), UsageError);
    CHECK_THROWS_WITH(env_int("TRIDENT_TEST_INT", 7, 1, 10), Contains("TRIDENT_TEST_INT"));
  }
  for (const char* yes : {"1", "true", "YES", "On"}) {
    ScopedEnv v("TRIDENT_TEST_FLAG", yes);
    CHECK(env_flag("TRIDENT_TEST_FLAG", false));
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    ScopedEnv v("TRIDENT_TEST_FLAG", no);
    CHECK_FALSE(env_flag("TRIDENT_TEST_FLAG", true));
  }
  {
    ScopedEnv v("TRIDENT_TEST_FLAG", "maybe");
    CHECK_THROWS_AS(env_flag("TRIDENT_TEST_FLAG", true), UsageError);
  }
  CHECK(split(" a , b,,c ", ',') == std::vector<std::string>{"a", "b", "", "c"});
  CHECK(split("", ',') == std::vector<std::string>{""});
}
