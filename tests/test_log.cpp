// The log callback (core/log.h): an application's handler receives the library's own messages
// with their level, the default handler writes them to stderr, and handlers are thread-safe.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "trident/core/log.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"

using namespace trident;

namespace {

// Collects every message while alive; restores the handler it replaced.
class CollectingHandler {
 public:
  CollectingHandler() {
    previous_ = set_log_handler([this](LogLevel level, const std::string& message) {
      std::lock_guard<std::mutex> lock(mutex_);
      messages_.emplace_back(level, message);
    });
  }
  ~CollectingHandler() { set_log_handler(previous_); }
  std::vector<std::pair<LogLevel, std::string>> messages() {
    std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<LogLevel, std::string>> messages_;
  LogHandler previous_;
};

// What `body` writes to the process's stderr (file descriptor 2).
template <typename Body>
std::string captured_stderr(Body body) {
  std::fflush(stderr);
  char path[] = "/tmp/trident_log_test_XXXXXX";
  const int file = mkstemp(path);
  REQUIRE(file >= 0);
  const int saved = dup(2);
  dup2(file, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  return text;
}

}  // namespace

TEST_CASE("log: an installed handler receives messages with their level, not stderr", "[log]") {
  std::string written;
  {
    CollectingHandler handler;
    written = captured_stderr([] {
      log_warning("first");
      log_message(LogLevel::debug, "second");
    });
    const auto messages = handler.messages();
    REQUIRE(messages.size() == 2);
    CHECK(messages[0] == std::make_pair(LogLevel::warning, std::string("first")));
    CHECK(messages[1] == std::make_pair(LogLevel::debug, std::string("second")));
  }
  CHECK(written.empty());
}

TEST_CASE("log: the default handler writes warnings to stderr and drops debug", "[log]") {
  const LogHandler previous = set_log_handler(nullptr);
  const std::string written = captured_stderr([] {
    log_warning("cache disabled");
    log_info("profile table");
    log_message(LogLevel::debug, "noise");
  });
  set_log_handler(previous);
  CHECK(written == "trident: warning: cache disabled\ntrident: profile table\n");
}

TEST_CASE("log: set_log_handler returns the handler it replaces", "[log]") {
  int calls = 0;
  const LogHandler outer = set_log_handler([&](LogLevel, const std::string&) { ++calls; });
  const LogHandler mine = set_log_handler(nullptr);  // back to the default
  REQUIRE(mine);
  mine(LogLevel::info, "direct");
  CHECK(calls == 1);
  set_log_handler(outer);
}

TEST_CASE("log: messages logged from several threads at once all arrive", "[log]") {
  CollectingHandler handler;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) log_info("thread " + std::to_string(t));
    });
  for (auto& thread : threads) thread.join();
  CHECK(handler.messages().size() == 800);
}

TEST_CASE("log: a backend's fallback warning reaches the handler (OpenCL capture)",
          "[log][opencl]") {
  Device* device = nullptr;
  for (const auto& backend : DeviceRegistry::global().backends())
    if (backend.name == "opencl" && !backend.devices.empty()) device = backend.devices[0].get();
  if (!device) {
    WARN("SKIPPED: no OpenCL device");
    return;
  }
  CollectingHandler handler;
  Tensor buffer = Tensor::zeros(*device, {4});
  float host[4];
  // A step that reads back to the host cannot be captured: the backend says so, runs it eagerly.
  auto work = device->capture([&] { device->copy_to_host(host, buffer.memory(), sizeof host); });
  CHECK(work == nullptr);
  const auto messages = handler.messages();
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].first == LogLevel::warning);
  CHECK(messages[0].second.find("could not be captured") != std::string::npos);
  CHECK(messages[0].second.find(device->info().id()) != std::string::npos);  // names the device
}
