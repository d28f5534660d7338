// CUDA-specific behaviour through the registry (CUDA's runtime header only where CUDA is built,
// for the driver's free-memory figure): discovery without a GPU, device info, allocation
// failures and their leak check, graph capture and replay (a whole training step of the new ops
// too), capture fallback, the cuBLASLt epilogue with misaligned operands, deterministic grid
// reductions, and a convolution split into chunks.
#include <catch2/catch.hpp>

#include "trident/core/allocator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trident/core/default_ops.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"

#if TRIDENT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

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

std::vector<float> random_values(size_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(count);
  for (float& v : out) v = dist(rng);
  return out;
}

// Bitwise equality of two float vectors (NaN payloads included): deterministic kernels.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The buffers of a small training step made of the ops that reduce across blocks (batch norm,
// the fused head, channel sums), the augmenting gather, convolution, pooling and AdamW with a
// schedule and gradient clipping. Two instances built from the same seed are identical.
struct StepBuffers {
  static constexpr int64_t kCount = 40, kBatch = 16, kChannels = 4, kSide = 8, kClasses = 3;
  Conv2dShape conv;
  BatchNormShape norm;
  Pool2dShape pool;
  Tensor images, table, labels_table, state, mean, inv_std;
  Tensor x, conv_w, conv_b, conv_y, workspace, norm_y, running_mean, running_var, save_mean,
      save_invstd, act, pooled, fc_w, fc_b, logits, logp, labels, loss, dlogits, dpooled, dact,
      dnorm, dconv, dconv_w, dconv_b, dnorm_gamma, dnorm_beta, gamma, beta, sumsq, m, v,
      schedule;

  explicit StepBuffers(Device& d) {
    conv.batch = kBatch; conv.in_channels = 1; conv.height = kSide; conv.width = kSide;
    conv.out_channels = kChannels; conv.kernel_h = 3; conv.kernel_w = 3;
    conv.pad_h = 1; conv.pad_w = 1;
    norm.outer = kBatch; norm.channels = kChannels; norm.inner = kSide * kSide;
    pool.batch = kBatch; pool.channels = kChannels; pool.height = kSide; pool.width = kSide;
    pool.kernel_h = kSide; pool.kernel_w = kSide; pool.stride_h = 1; pool.stride_w = 1;
    std::vector<uint8_t> bytes(size_t(kCount * kSide * kSide));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t((i * 37 + 11) % 251);
    images = Tensor::from_host(d, {kCount, 1, kSide, kSide}, bytes);
    std::vector<int32_t> order(static_cast<size_t>(6 * kBatch));  // six batches
    std::vector<int32_t> classes(static_cast<size_t>(kCount));
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t((i * 7 + 3) % kCount);
    for (size_t i = 0; i < classes.size(); ++i) classes[i] = int32_t(i % kClasses);
    table = Tensor::from_host(d, {int64_t(order.size())}, order);
    labels_table = Tensor::from_host(d, {kCount, 1}, classes);
    state = Tensor::zeros(d, {2}, DType::i32);
    mean = Tensor::from_host(d, {1}, std::vector<float>{0.25f});
    inv_std = Tensor::from_host(d, {1}, std::vector<float>{3.0f});
    x = Tensor::zeros(d, {kBatch, 1, kSide, kSide});
    conv_w = Tensor::from_host(d, {conv.weight_numel()}, random_values(size_t(conv.weight_numel()), 1));
    conv_b = Tensor::from_host(d, {kChannels}, random_values(kChannels, 2));
    conv_y = Tensor::zeros(d, {conv.output_numel()});
    workspace = Tensor::zeros(d, {int64_t(std::max<size_t>(d.conv2d_workspace_bytes(conv), 1))},
                              DType::u8);
    norm_y = Tensor::zeros(d, {norm.numel()});
    running_mean = Tensor::zeros(d, {kChannels});
    running_var = Tensor::from_host(d, {kChannels}, std::vector<float>(kChannels, 1.0f));
    save_mean = Tensor::zeros(d, {kChannels});
    save_invstd = Tensor::zeros(d, {kChannels});
    gamma = Tensor::from_host(d, {kChannels}, random_values(kChannels, 3, 0.5f, 1.5f));
    beta = Tensor::from_host(d, {kChannels}, random_values(kChannels, 4));
    act = Tensor::zeros(d, {norm.numel()});
    pooled = Tensor::zeros(d, {kBatch, kChannels});
    fc_w = Tensor::from_host(d, {kChannels * kClasses}, random_values(kChannels * kClasses, 5));
    fc_b = Tensor::from_host(d, {kClasses}, random_values(kClasses, 6));
    logits = Tensor::zeros(d, {kBatch, kClasses});
    logp = Tensor::zeros(d, {kBatch, kClasses});
    labels = Tensor::zeros(d, {kBatch, 1}, DType::i32);
    loss = Tensor::zeros(d, {1});
    dlogits = Tensor::zeros(d, {kBatch, kClasses});
    dpooled = Tensor::zeros(d, {kBatch, kChannels});
    dact = Tensor::zeros(d, {norm.numel()});
    dnorm = Tensor::zeros(d, {norm.numel()});
    dconv = Tensor::zeros(d, {conv.output_numel()});
    dconv_w = Tensor::zeros(d, {conv.weight_numel()});
    dconv_b = Tensor::zeros(d, {kChannels});
    dnorm_gamma = Tensor::zeros(d, {kChannels});
    dnorm_beta = Tensor::zeros(d, {kChannels});
    sumsq = Tensor::zeros(d, {1});
    m = Tensor::zeros(d, {conv.weight_numel()});
    v = Tensor::zeros(d, {conv.weight_numel()});
    // (lr, beta1) for steps 0, 1, 2 and after.
    schedule = Tensor::from_host(d, {3, 2}, std::vector<float>{1e-2f, 0.9f, 5e-3f, 0.8f, 3e-3f, 0.7f});
  }

  void step(Device& d) {
    SampleTransform t;
    t.scale = 1.0f / 255.0f;
    t.mean = mean;
    t.inv_std = inv_std;
    t.crop_padding = 2;
    t.horizontal_flip = true;
    t.seed = 77;
    t.stream = 5;
    d.gather_samples(images, table, state, t, x);
    d.gather_rows(labels_table, table, state, labels);
    d.conv2d_forward(conv, x, conv_w, conv_b, conv_y, workspace);
    d.batchnorm_forward(norm, true, conv_y, gamma, beta, running_mean, running_var, norm_y,
                        save_mean, save_invstd);
    d.unary_forward(UnaryOp::gelu, norm_y, act);
    d.avgpool2d_forward(pool, act, pooled);
    GemmArgs g;  // logits[B, classes] = tanh(pooled[B, C] fc_w[C, classes] + fc_b)
    g.m = kBatch; g.n = kClasses; g.k = kChannels;
    g.a = pooled; g.b = fc_w; g.c = logits;
    g.bias = fc_b; g.bias_kind = BiasKind::per_column;
    g.activation = UnaryOp::tanh;
    d.gemm(g);
    const Tensor flat_labels = labels.reshape({kBatch});
    d.log_softmax_nll(logits, flat_labels, 1.0f / kBatch, 0.1f, logp, loss, false, dlogits);
    GemmArgs gb;  // dpooled[B, C] = dlogits[B, classes] fc_w[C, classes]^T (tanh' ignored)
    gb.trans_b = true;
    gb.m = kBatch; gb.n = kChannels; gb.k = kClasses;
    gb.a = dlogits; gb.b = fc_w; gb.c = dpooled;
    d.gemm(gb);
    d.avgpool2d_backward(pool, dpooled, dact);
    d.unary_backward(UnaryOp::gelu, norm_y, Tensor(), dact, dact);
    d.batchnorm_backward(norm, conv_y, dact, gamma, save_mean, save_invstd, dnorm, dnorm_gamma,
                         dnorm_beta);
    d.conv2d_backward(conv, x, conv_w, dnorm, Tensor(), dconv_w, dconv_b, workspace);
    d.channel_sums(dconv_w, dconv_w, sumsq, 1, 1, conv.weight_numel(), 0.0f);
    AdamParams hp;
    hp.weight_decay = 0.01f;
    hp.decoupled_weight_decay = true;
    UpdateControl control;
    control.schedule = schedule;
    control.grad_sumsq = sumsq;
    control.max_norm = 0.05f;
    d.adam_update(conv_w, dconv_w, m, v, hp, control, state);
    d.advance_step(state);
  }

  std::vector<std::vector<float>> results() const {
    std::vector<std::vector<float>> out;
    for (const Tensor* t : {&x, &conv_w, &conv_y, &norm_y, &running_mean, &running_var, &logits,
                            &logp, &loss, &dlogits, &dnorm, &dconv_w, &dconv_b, &dnorm_gamma,
                            &sumsq, &m, &v})
      out.push_back(t->to_host());
    return out;
  }
};

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
      d->allocator().allocate(huge);
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

#if TRIDENT_HAVE_CUDA
// The driver's free bytes on the CUDA device `id` ("cuda:N").
size_t driver_free_bytes(const std::string& id) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaSetDevice(std::stoi(id.substr(id.find(':') + 1)));
  cudaMemGetInfo(&free_bytes, &total_bytes);
  return free_bytes;
}

// A batch that cannot fit, 1000 times in one process: each failure releases the pool's cached
// blocks, retries, and raises OutOfMemory naming requested, free and cached bytes; nothing leaks
// on that path, so the driver's free memory comes back to where it was (the cached blocks
// included, as they are handed back). [oom]: excluded from sanitizer runs, as above.
TEST_CASE("cuda: 1000 allocations that cannot fit each raise OutOfMemory, and device memory "
          "returns to its baseline",
          "[cuda][oom]") {
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    { Tensor a = Tensor::zeros(*d, {1 << 20}), b = Tensor::zeros(*d, {1 << 18}); }
    d->synchronize();
    const size_t cached = d->allocator().bytes_cached();
    REQUIRE(cached > 0);
    const size_t baseline = driver_free_bytes(d->info().id()) + cached;
    REQUIRE(baseline > cached);
    // A whole number of MiB, as the pool rounds large requests: the message names this size.
    const size_t too_big = ((baseline >> 20) + 8192) << 20;
    int failures = 0;
    for (int i = 0; i < 1000; ++i) {
      try {
        d->allocator().allocate(too_big);
        FAIL("allocating " << too_big << " bytes succeeded");
      } catch (const OutOfMemory& e) {
        ++failures;
        if (i == 0) {
          CHECK_THAT(e.what(), Contains("cannot allocate " + std::to_string(too_big)));
          CHECK_THAT(e.what(), Contains("bytes are free"));
          CHECK_THAT(e.what(), Contains(std::to_string(cached) + " bytes cached"));
        }
      }
    }
    CHECK(failures == 1000);
    d->synchronize();
    const size_t after = driver_free_bytes(d->info().id());
    INFO("free before " << baseline << " bytes (cached blocks included), after " << after);
    CHECK(after + (size_t(64) << 20) >= baseline);
    Tensor t = Tensor::zeros(*d, {4});
    CHECK(t.to_host() == std::vector<float>(4, 0.0f));
  }
}
#endif  // TRIDENT_HAVE_CUDA

TEST_CASE("cuda: a captured step replays with fresh on-device state", "[cuda][capture]") {
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    Tensor x = Tensor::from_host(*d, {3}, std::vector<float>{1.f, 2.f, 3.f});
    Tensor acc = Tensor::zeros(*d, {3});
    Tensor state = Tensor::zeros(*d, {2}, DType::i32);
    auto step = [&] {
      d->axpby(x, acc, 2.0f, 1.0f);  // acc += 2x
      d->advance_step(state);
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
      d->fill(y, 5.0f);
      throw ShapeError("planted failure");
    });
    CHECK_FALSE(captured);
    d->fill(y, 7.0f);  // eager work runs normally afterwards
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
      g.a = ta.view(1, {M * K}); g.lda = K;
      g.b = tb.view(1, {K * N}); g.ldb = N;
      g.c = tc.view(1, {M * N}); g.ldc = N;
      g.bias = tbias.view(int64_t(pad), {N});
      g.bias_kind = BiasKind::per_column;
      g.activation = UnaryOp::relu;
      d->gemm(g);
      const std::vector<float> got = read(*d, tc.memory().at(4), size_t(M * N));
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - expected[i]) < 1e-5f);
    }
  }
}

TEST_CASE("cuda: a training step of the new ops replays from a CUDA graph bit for bit like eager "
          "steps", "[cuda][capture]") {
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    StepBuffers eager(*d), graph(*d);
    for (int i = 0; i < 5; ++i) eager.step(*d);
    graph.step(*d);  // the first step runs eagerly (the trainer's order)
    auto captured = d->capture([&] { graph.step(*d); });
    REQUIRE(captured);
    for (int i = 0; i < 4; ++i) captured->replay();
    const auto want = eager.results(), got = graph.results();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("buffer " << i);
      CHECK(same_bits(got[i], want[i]));
    }
    // The step did something: the weights moved and the loss is finite.
    CHECK(std::isfinite(want[8][0]));
    CHECK_FALSE(same_bits(want[1], StepBuffers(*d).conv_w.to_host()));
  }
}

TEST_CASE("cuda: reductions across blocks give the same bits every time", "[cuda][determinism]") {
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    // A gradient-norm-sized channel, bias gradients of many columns, a BatchNorm2d layer.
    const int64_t n = 3000017;
    Tensor g = Tensor::from_host(*d, {n}, random_values(size_t(n), 11));
    Tensor sumsq = Tensor::zeros(*d, {1}), columns = Tensor::zeros(*d, {1000});
    BatchNormShape s;
    s.outer = 64; s.channels = 32; s.inner = 784;
    Tensor x = Tensor::from_host(*d, {s.numel()}, random_values(size_t(s.numel()), 12, 5.0f, 9.0f));
    Tensor dy = Tensor::from_host(*d, {s.numel()}, random_values(size_t(s.numel()), 13));
    Tensor y = Tensor::zeros(*d, {s.numel()}), dx = Tensor::zeros(*d, {s.numel()});
    Tensor rm = Tensor::zeros(*d, {32}), rv = Tensor::zeros(*d, {32}), sm = Tensor::zeros(*d, {32}),
           si = Tensor::zeros(*d, {32}), dg = Tensor::zeros(*d, {32}), dbeta = Tensor::zeros(*d, {32});
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 3; ++run) {
      d->channel_sums(g, g, sumsq, 1, 1, n, 0.0f);
      d->channel_sums(g.view(0, {3000 * 1000}), Tensor(), columns, 3000, 1000, 1, 0.0f);
      d->batchnorm_forward(s, true, x, Tensor(), Tensor(), rm, rv, y, sm, si);
      d->batchnorm_backward(s, x, dy, Tensor(), sm, si, dx, dg, dbeta);
      const std::vector<std::vector<float>> now = {sumsq.to_host(), columns.to_host(),
                                                   y.to_host(), sm.to_host(), si.to_host(),
                                                   dx.to_host(), dg.to_host(), dbeta.to_host()};
      if (run == 0) {
        first = now;
        continue;
      }
      for (size_t i = 0; i < now.size(); ++i) {
        INFO("run " << run << ", result " << i);
        CHECK(same_bits(now[i], first[i]));
      }
    }
    // And the sum of squares is right (float64 on the host).
    const std::vector<float> host = g.to_host();
    double want = 0.0;
    for (float v : host) want += double(v) * double(v);
    CHECK(std::fabs(double(first[0][0]) - want) <= 1e-6 * want);
  }
}

TEST_CASE("cuda: a convolution whose batch does not fit one workspace runs in chunks and matches "
          "the core default", "[cuda][conv2d]") {
  // 16 channels of 256x256 with a 3x3 kernel: about 9.5M column floats a sample, so the 1 GiB
  // workspace bound splits a batch of 30 into chunks.
  Conv2dShape s;
  s.batch = 30; s.in_channels = 16; s.height = 256; s.width = 256; s.out_channels = 8;
  s.kernel_h = 3; s.kernel_w = 3; s.pad_h = 1; s.pad_w = 1;
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    const size_t bytes = d->conv2d_workspace_bytes(s);
    const size_t whole = size_t(s.batch) * size_t(s.patch_size() + 1) * 256 * 256 * sizeof(float);
    CHECK(bytes < whole);  // really split
    Tensor x = Tensor::from_host(*d, {s.input_numel()}, random_values(size_t(s.input_numel()), 21));
    Tensor w = Tensor::from_host(*d, {s.weight_numel()}, random_values(size_t(s.weight_numel()), 22));
    Tensor b = Tensor::from_host(*d, {8}, random_values(8, 23));
    Tensor dy = Tensor::from_host(*d, {s.output_numel()}, random_values(size_t(s.output_numel()), 24));
    Tensor workspace = Tensor::empty(*d, {int64_t(bytes)}, DType::u8);
    Tensor fallback = Tensor::empty(*d, {int64_t(defaults::conv2d_workspace_bytes(s))}, DType::u8);
    Tensor y = Tensor::empty(*d, {s.output_numel()}), y_want = Tensor::empty(*d, {s.output_numel()});
    Tensor dx = Tensor::empty(*d, {s.input_numel()}), dx_want = Tensor::empty(*d, {s.input_numel()});
    Tensor dw = Tensor::empty(*d, {s.weight_numel()}), dw_want = Tensor::empty(*d, {s.weight_numel()});
    Tensor db = Tensor::empty(*d, {8}), db_want = Tensor::empty(*d, {8});
    d->conv2d_forward(s, x, w, b, y, workspace);
    d->conv2d_backward(s, x, w, dy, dx, dw, db, workspace);
    defaults::conv2d_forward(*d, s, x, w, b, y_want, fallback);
    defaults::conv2d_backward(*d, s, x, w, dy, dx_want, dw_want, db_want, fallback);
    auto close = [](const std::vector<float>& got, const std::vector<float>& want, double tol) {
      size_t bad = 0;
      for (size_t i = 0; i < want.size(); ++i)
        if (!(std::fabs(double(got[i]) - double(want[i])) <= tol * (1.0 + std::fabs(want[i]))))
          ++bad;
      return bad;
    };
    const double positions = double(s.batch) * 256 * 256;
    CHECK(close(y.to_host(), y_want.to_host(), 1e-4) == 0);
    CHECK(close(dx.to_host(), dx_want.to_host(), 1e-4) == 0);
    CHECK(close(dw.to_host(), dw_want.to_host(), 2e-6 * std::sqrt(positions)) == 0);
    CHECK(close(db.to_host(), db_want.to_host(), 2e-6 * std::sqrt(positions)) == 0);
  }
}
