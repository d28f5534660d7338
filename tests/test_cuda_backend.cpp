// CUDA-specific behaviour through the registry (no CUDA headers, so it builds in every
// configuration): discovery without a GPU, device info, allocation failures, graph capture and
// replay, capture fallback, and the cuBLASLt epilogue with misaligned operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"

using namespace trident;
using Catch::Matchers::Contains;

namespace {

const DeviceRegistry::BackendEntry* cuda_entry() {
  for (const auto& backend : DeviceRegistry::global().backends())
    if (backend.name == "cuda") return &backend;
  return nullptr;
}

std::vector<Device*> cuda_devices() {
  std::vector<Device*> devices;
  if (const auto* entry = cuda_entry())
    for (const auto& d : entry->devices) devices.push_back(d.get());
  return devices;
}

std::vector<float> read(Device& device, DeviceMemory src, size_t count) {
  std::vector<float> out(count);
  device.copy_to_host(out.data(), src, count * sizeof(float));
  return out;
}

}  // namespace

TEST_CASE("cuda: a build without GPUs reports why, and other backends go on", "[cuda]") {
  const auto* entry = cuda_entry();
  if (!entry) {
    WARN("SKIPPED: this build has no CUDA backend");
    return;
  }
  if (entry->devices.empty()) {
    CHECK_FALSE(entry->why_none.empty());
    CHECK_FALSE(DeviceRegistry::global().all_devices().empty());  // the CPU is still there
    CHECK_THROWS_AS(DeviceRegistry::global().device("cuda:0"), DeviceNotFound);
    WARN("SKIPPED CUDA device tests: " << entry->why_none);
  }
}

TEST_CASE("cuda: device info names the GPU, its memory and compute capability", "[cuda]") {
  for (Device* d : cuda_devices()) {
    const DeviceInfo& info = d->info();
    INFO(info.id());
    CHECK(info.backend == "cuda");
    CHECK_FALSE(info.name.empty());
    CHECK(info.memory_bytes > 0);
    CHECK(info.compute_units > 0);
    CHECK_THAT(info.detail, Contains("compute capability"));
    CHECK_THAT(info.driver, Contains("CUDA driver"));
  }
}

// Tagged [oom]: compute-sanitizer reports the planted cudaMalloc failure as an API error, so
// sanitizer runs exclude it with "~[oom]".
TEST_CASE("cuda: an impossible allocation is OutOfMemory naming requested and free bytes",
          "[cuda][oom]") {
  for (Device* d : cuda_devices()) {
    const size_t huge = size_t(1) << 50;  // 1 PiB
    try {
      d->raw_allocate(huge);
      FAIL("allocating 1 PiB succeeded");
    } catch (const OutOfMemory& e) {
      CHECK_THAT(e.what(), Contains(std::to_string(huge)));
      CHECK_THAT(e.what(), Contains("free"));
    }
    // The device is still usable afterwards.
    Tensor t = Tensor::zeros(*d, {4});
    CHECK(t.to_host() == std::vector<float>(4, 0.0f));
  }
}

TEST_CASE("cuda: a captured step replays with fresh on-device state", "[cuda][capture]") {
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    Tensor x = Tensor::from_host(*d, {3}, std::vector<float>{1.f, 2.f, 3.f});
    Tensor acc = Tensor::zeros(*d, {3});
    Tensor state = Tensor::zeros(*d, {2}, DType::i32);
    auto step = [&] {
      d->axpby(x.memory(), acc.memory(), 3, 2.0f, 1.0f);  // acc += 2x
      d->advance_step(state.memory());
    };
    step();  // eager
    auto captured = d->capture(step);
    REQUIRE(captured);
    for (int i = 0; i < 3; ++i) captured->replay();
    CHECK(read(*d, acc.memory(), 3) == std::vector<float>{8.f, 16.f, 24.f});
    uint32_t counters[2] = {0, 0};
    d->copy_to_host(counters, state.memory(), sizeof counters);
    CHECK(counters[0] == 4u);
    CHECK(counters[1] == 4u);
  }
}

TEST_CASE("cuda: a step that fails during capture gives nullptr and leaves the stream usable",
          "[cuda][capture]") {
  for (Device* d : cuda_devices()) {
    Tensor y = Tensor::zeros(*d, {2});
    auto captured = d->capture([&] {
      d->fill(y.memory(), 2, 5.0f);
      throw ShapeError("planted failure");
    });
    CHECK_FALSE(captured);
    d->fill(y.memory(), 2, 7.0f);  // eager work runs normally afterwards
    CHECK(read(*d, y.memory(), 2) == std::vector<float>{7.f, 7.f});
  }
}

TEST_CASE("cuda: GEMM with fused bias and ReLU at unaligned offsets matches a plain loop",
          "[cuda][gemm]") {
  // M=5, N=7, K=3; every operand starts one float into its buffer, so the cuBLASLt path must
  // pick kernels for 4-byte alignment (and the bias, not 16-byte aligned, goes the other path).
  const int64_t M = 5, N = 7, K = 3;
  std::vector<float> a(1 + M * K), b(1 + K * N), bias(1 + N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) * 0.25f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(int(i % 3) - 1);
  std::vector<float> expected(M * N);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      float sum = 0.f;
      for (int64_t k = 0; k < K; ++k) sum += a[1 + r * K + k] * b[1 + k * N + c];
      sum += bias[1 + c];
      expected[r * N + c] = sum < 0.f ? 0.f : sum;
    }
  for (Device* d : cuda_devices()) {
    for (size_t pad : {size_t(1), size_t(8)}) {  // bias 4 bytes in (unaligned), 32 bytes in
      INFO(d->info().id() << ", bias " << pad * 4 << " bytes into its buffer");
      Tensor ta = Tensor::from_host(*d, {int64_t(a.size())}, a);
      Tensor tb = Tensor::from_host(*d, {int64_t(b.size())}, b);
      std::vector<float> bias_host(pad, 0.f);
      bias_host.insert(bias_host.end(), bias.begin() + 1, bias.end());
      Tensor tbias = Tensor::from_host(*d, {int64_t(bias_host.size())}, bias_host);
      Tensor tc = Tensor::zeros(*d, {1 + M * N});
      GemmArgs g;
      g.m = M; g.n = N; g.k = K;
      g.a = ta.memory().at(4); g.lda = K;
      g.b = tb.memory().at(4); g.ldb = N;
      g.c = tc.memory().at(4); g.ldc = N;
      g.bias = tbias.memory().at(pad * sizeof(float));
      g.bias_kind = BiasKind::per_column;
      g.relu = true;
      d->gemm(g);
      const std::vector<float> got = read(*d, tc.memory().at(4), size_t(M * N));
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - expected[i]) < 1e-5f);
    }
  }
}
