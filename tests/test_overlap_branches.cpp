// A residual block's projection shortcut queued beside its body (Residual::run_shortcut) on a
// device whose side queue takes every op (Device::side_queue_runs_every_op). On a CPU device that
// claims such a queue and either runs side work at once or holds the shortcut's convolution and
// batch norm until the join, training must equal the plain device's bit for bit, weights and
// running statistics: holding catches main work that reads the shortcut's output (the fused sum
// in the body's last batch norm, the block's summed input gradient) before the join. The CUDA
// side stream runs between the two; the K-step agreement tests of conformance_training.cpp and
// the ResNet tests run it on GPUs.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <memory>
#include <functional>
#include <vector>

#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/error.h"
#include "trident/models/layers.h"
#include "trident/models/sequential.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/conformance.h"
#include "tests/fake_collective.h"
#include "tests/test_data.h"

using namespace trident;

namespace {

// A CPU device whose side queue takes every op. deferred: the convolutions and batch norms
// queued beside (all the shortcut issues) are held until the join; otherwise they run at once.
// A weight gradient the caller lets finish beside (conv2d_backward's weight_gradient_beside) is
// computed at once into a copy and dw (db) hold NaN until the join copies it over, as a side
// stream would leave them unfinished: a read before the join trains on NaN.
class BranchQueueCpuDevice : public trident::testing::ReplayingCpuDevice {
 public:
  explicit BranchQueueCpuDevice(bool deferred) : ReplayingCpuDevice(0), deferred_(deferred) {}
  int begins = 0, joins = 0, ops_beside = 0, weight_gradients_beside = 0;

 protected:
  bool do_has_side_queue() const override { return true; }
  bool do_side_queue_runs_every_op() const override { return true; }
  void do_begin_beside() override {
    ++begins;
    beside_ = true;
  }
  void do_end_beside() override {
    beside_ = false;
    last_mark_ = held_.size();
  }
  void do_join_beside() override {
    ++joins;
    for (auto& work : held_) work();
    held_.clear();
    last_mark_ = 0;
  }
  // Up to the end of the last queue_beside's work; weight gradients queued since stay held.
  void do_join_last_beside() override {
    ++joins;
    for (size_t i = 0; i < last_mark_; ++i) held_[i]();
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(last_mark_));
    last_mark_ = 0;
  }
  // Held: the workspace is reported as holding nothing (the backward makes its columns again).
  bool do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& y, const Tensor& workspace) override {
    if (!hold()) return CpuDevice::do_conv2d_forward(s, x, w, b, y, workspace);
    held_.push_back([=, this] { CpuDevice::do_conv2d_forward(s, x, w, b, y, workspace); });
    return false;
  }
  bool do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                          const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                          const Tensor& workspace, bool workspace_valid,
                          bool weight_gradient_beside) override {
    if (weight_gradient_beside) {
      ++weight_gradients_beside;
      note_work_beside();
      const Tensor dw_copy = copy_of(dw);
      const Tensor db_copy = db.defined() ? copy_of(db) : Tensor();
      CpuDevice::do_conv2d_backward(s, x, w, dy, dx, dw_copy, db_copy, workspace, workspace_valid,
                                    false);
      CpuDevice::do_fill(dw, std::nanf(""));
      if (db.defined()) CpuDevice::do_fill(db, std::nanf(""));
      held_.push_back([=, this] {
        CpuDevice::do_copy_on_device(dw.memory(), dw_copy.memory(), dw.bytes());
        if (db.defined()) CpuDevice::do_copy_on_device(db.memory(), db_copy.memory(), db.bytes());
      });
      return false;
    }
    if (!hold())
      return CpuDevice::do_conv2d_backward(s, x, w, dy, dx, dw, db, workspace, workspace_valid,
                                           weight_gradient_beside);
    held_.push_back([=, this] {
      CpuDevice::do_conv2d_backward(s, x, w, dy, dx, dw, db, workspace, workspace_valid,
                                    weight_gradient_beside);
    });
    return false;
  }
  void do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                            const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& y, const Tensor& save_mean,
                            const Tensor& save_invstd) override {
    auto work = [=, this] {
      CpuDevice::do_batchnorm_forward(s, training, x, gamma, beta, running_mean, running_var, y,
                                      save_mean, save_invstd);
    };
    if (hold())
      held_.push_back(work);
    else
      work();
  }
  void do_batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd, const Tensor& dx, const Tensor& dgamma,
                             const Tensor& dbeta, const Tensor& beta) override {
    auto work = [=, this] {
      CpuDevice::do_batchnorm_backward(s, x, dy, gamma, save_mean, save_invstd, dx, dgamma,
                                       dbeta, beta);
    };
    if (hold())
      held_.push_back(work);
    else
      work();
  }

 private:
  // A tensor of t's shape kept for t's memory (made in the first, uncaptured step).
  Tensor copy_of(const Tensor& t) {
    for (auto& [of, copy] : copies_)
      if (of.memory().handle == t.memory().handle && of.memory().offset == t.memory().offset)
        return copy;
    copies_.emplace_back(t, Tensor::empty(*this, t.shape()));
    return copies_.back().second;
  }
  bool hold() {
    if (beside_) ++ops_beside;
    return beside_ && deferred_;
  }
  bool deferred_;
  bool beside_ = false;
  std::vector<std::function<void()>> held_;
  size_t last_mark_ = 0;  // held_[0, last_mark_) is the last queue_beside's work and before
  std::vector<std::pair<Tensor, Tensor>> copies_;
};

// A stem, one block with a projection shortcut (1x1 stride-2 convolution and batch norm), one
// with an identity shortcut, and the head: both Residual forward paths run (the fused sum in
// the body's last batch norm, and a block whose body ends in a ReLU, summed by the block).
Network small_resnet() {
  Network net("branches");
  net.add("conv1", Conv2d(8, 3).padding(1).bias(false));
  net.add("bn1", BatchNorm2d());
  net.add("relu", ReLU());
  net.add("layer1", basic_block(8, 16, 2));
  Sequential body;
  body.add("conv1", Conv2d(16, 3).padding(1));
  body.add("relu", ReLU());  // not a batch norm last: the block sums the branches itself
  Sequential shortcut;
  shortcut.add("0", Conv2d(16, 1).bias(false));
  shortcut.add("1", BatchNorm2d());
  net.add("layer2", Residual(std::move(body), std::move(shortcut)));
  net.add("pool", GlobalAvgPool2d());
  net.add("flatten", Flatten());
  net.add("fc", Linear(10));
  return net;
}

struct Run {
  std::vector<float> weights, buffers;
};

Run train(Device& device, const TrainOptions& options) {
  const DatasetSplits data = trident::testing::small_splits(200, 50);
  Trainer trainer({&device}, small_resnet, data, options);
  for (int e = 0; e < 2; ++e) trainer.train_epoch();
  return {trainer.network().parameters().to_host(), trainer.network().buffers().to_host()};
}

}  // namespace

TEST_CASE("overlap: projection shortcuts queued beside their bodies equal them in order, bit "
          "for bit",
          "[overlap][residual]") {
  for (const bool deferred : {false, true}) {
    for (const bool capture : {false, true}) {
      DYNAMIC_SECTION((deferred ? "held until the join" : "run at once")
                      << (capture ? ", captured" : "")) {
        TrainOptions o;
        o.batch = 50;  // 4 steps an epoch, 8 in all
        o.optimizer.lr = 0.05f;
        o.optimizer.momentum = 0.9f;
        o.capture = capture;
        CpuDevice plain(0, 1, "CPU (test)");
        const Run want = train(plain, o);
        BranchQueueCpuDevice side(deferred);
        const Run got = train(side, o);
        REQUIRE(got.weights.size() == want.weights.size());
        CHECK(got.weights == want.weights);
        CHECK(got.buffers == want.buffers);
        // Two shortcuts, forward and backward, beside in every step but the first (which
        // allocates their buffers): 7 x 4 queues, each a convolution and a batch norm.
        CHECK(side.begins == 7 * 4);
        CHECK(side.ops_beside == 7 * 4 * 2);
        CHECK(side.joins >= 7 * 4);
        // Six convolutions; those of the shortcuts beside the body, in steps 2 to 8, leave
        // their weight gradients to the side queue themselves.
        CHECK(side.weight_gradients_beside == 6 + 7 * 4);
      }
    }
  }
}

TEST_CASE("overlap: shortcuts stay in order where the side queue takes elementwise ops only",
          "[overlap][residual]") {
  // The side queue of test_overlap_updates.cpp's device: every op but the elementwise ones
  // refused there, so a Residual must not queue its shortcut beside.
  class UpdatesOnly : public trident::testing::ReplayingCpuDevice {
   public:
    UpdatesOnly() : ReplayingCpuDevice(0) {}
    int begins = 0;

   protected:
    bool do_has_side_queue() const override { return true; }
    void do_begin_beside() override { ++begins; }
  };
  TrainOptions o;
  o.batch = 50;
  o.overlap = false;  // no optimizer updates beside either
  UpdatesOnly device;
  CpuDevice plain(0, 1, "CPU (test)");
  CHECK(train(device, o).weights == train(plain, o).weights);
  CHECK(device.begins == 0);
  SECTION("and an op that may not go beside is refused there with a message") {
    const Tensor x = Tensor::zeros(device, {2, 1, 4, 4}), y = Tensor::zeros(device, {2, 1, 4, 4});
    const Tensor mean = Tensor::zeros(device, {1});
    const Tensor var = Tensor::from_host(device, {1}, std::vector<float>{1.0f});
    BatchNormShape s;
    s.outer = 2, s.channels = 1, s.inner = 16;
    REQUIRE_THROWS_WITH(device.queue_beside([&] {
      device.batchnorm_forward(s, false, x, Tensor(), Tensor(), mean, var, y, Tensor(), Tensor());
    }),
                        Catch::Contains("cannot be queued beside"));
  }
}

// On CUDA both the shortcuts and the convolutions' weight gradients go to the side stream.
TEST_CASE("conformance: on every device, shortcuts beside their bodies equal them in order",
          "[conformance][overlap][residual]") {
  const DatasetSplits data = trident::testing::small_splits(200, 50);
  for (Device* d : trident::testing::devices_under_test()) {
    for (const Precision precision : {Precision::fp32, Precision::bf16}) {
      if (!d->supports(compute_dtype(precision))) continue;
      DYNAMIC_SECTION(d->info().id() << ", " << precision_name(precision)
                                     << (d->side_queue_runs_every_op() ? "" : " (in order)")) {
        TrainOptions o;
        o.batch = 50;
        o.optimizer.lr = 0.05f;
        o.optimizer.momentum = 0.9f;
        o.precision = precision;
        auto run = [&](bool beside) {
          o.overlap = beside;
          Trainer trainer({d}, small_resnet, data, o);
          for (int e = 0; e < 2; ++e) trainer.train_epoch();  // 8 steps, captured after one
          return Run{trainer.network().parameters().to_host(),
                     trainer.network().buffers().to_host()};
        };
        const Run in_order = run(false), beside = run(true);
        CHECK(beside.weights == in_order.weights);
        CHECK(beside.buffers == in_order.buffers);
      }
    }
  }
}

TEST_CASE("overlap: data-parallel gradient sums start after the weight gradients left beside",
          "[overlap][residual][data-parallel]") {
  // Two devices whose weight gradients finish beside, summed in buckets as NCCL does (started
  // during backward): a bucket handed over while side work is pending would sum unfinished
  // gradients (NaN here).
  class CheckingCollective : public trident::testing::PerDeviceCollective {
   public:
    explicit CheckingCollective(std::vector<Device*> devices)
        : PerDeviceCollective(devices), devices_(std::move(devices)) {}
    std::atomic<int> started_with_pending{0}, starts{0};
    void start_all_reduce_sum_device(size_t index, DeviceMemory buffer, int64_t count) override {
      ++starts;
      if (devices_[index]->beside_pending()) ++started_with_pending;
      PerDeviceCollective::start_all_reduce_sum_device(index, buffer, count);
    }

   private:
    std::vector<Device*> devices_;
  };
  const DatasetSplits data = trident::testing::small_splits(200, 50);
  TrainOptions o;
  o.batch = 50;
  o.optimizer.lr = 0.05f;
  o.optimizer.momentum = 0.9f;
  o.bucket_bytes = 4 << 10;  // several buckets a step
  CpuDevice plain_a(0, 1, "CPU (test)"), plain_b(1, 1, "CPU (test)");
  Trainer plain({&plain_a, &plain_b}, small_resnet, data, o);
  for (int e = 0; e < 2; ++e) plain.train_epoch();
  BranchQueueCpuDevice a(true), b(true);
  CheckingCollective* checking = nullptr;
  o.collective = [&](const std::vector<Device*>& devices) {
    auto made = std::make_unique<CheckingCollective>(devices);
    made->overlapping = true;
    checking = made.get();
    return std::unique_ptr<Collective>(std::move(made));
  };
  Trainer bucketed({&a, &b}, small_resnet, data, o);
  REQUIRE(bucketed.overlaps_backward());
  for (int e = 0; e < 2; ++e) bucketed.train_epoch();
  CHECK(bucketed.network().parameters().to_host() == plain.network().parameters().to_host());
  REQUIRE(checking != nullptr);
  CHECK(checking->starts > 2 * 8);
  CHECK(checking->started_with_pending == 0);
  CHECK(a.weight_gradients_beside > 0);
}

TEST_CASE("conformance: steps whose convolutions may leave their weight gradients beside are "
          "captured, and replay them",
          "[conformance][overlap][capture]") {
  // A 5x5 convolution of 10 channels (the seed CNN's: every backend keeps its weight gradient in
  // order) and a 3x3 one of 32 (CUDA's implicit and Winograd paths finish it beside): the step
  // ends with a join either way, which must not pull an idle side queue into the capture.
  for (Device* d : trident::testing::devices_under_test()) {
    const Tensor probe = Tensor::zeros(*d, {4});
    if (!d->capture([&] { d->fill(probe, 1.0f); })) continue;  // no capture here
    for (const DType dtype : {DType::f32, DType::bf16}) {
      if (!d->supports(dtype)) continue;
      for (const bool wide : {false, true}) {
        DYNAMIC_SECTION(d->info().id() << ", " << dtype_name(dtype)
                                       << (wide ? ", 3x3 over 32 channels" : ", 5x5 over 10")) {
          Conv2dShape s;
          s.batch = 4, s.in_channels = wide ? 32 : 10, s.height = s.width = 12;
          s.out_channels = wide ? 32 : 20, s.kernel_h = s.kernel_w = wide ? 3 : 5;
          s.pad_h = s.pad_w = wide ? 1 : 0;
          s.dtype = dtype;
          auto values = [](int64_t n, float scale) {
            std::vector<float> v(static_cast<size_t>(n));
            for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int(i * 7919 % 41) - 20);
            return v;
          };
          const Tensor x = Tensor::from_host(*d, {s.input_numel()}, values(s.input_numel(), 0.05f),
                                             dtype);
          const Tensor w = Tensor::from_host(
              *d, {s.weight_numel()}, values(s.weight_numel(), 0.01f), dtype);
          const Tensor dy = Tensor::from_host(*d, {s.output_numel()},
                                              values(s.output_numel(), 0.02f), dtype);
          const Tensor y = Tensor::zeros(*d, {s.output_numel()}, dtype);
          const Tensor dx = Tensor::zeros(*d, {s.input_numel()}, dtype);
          const Tensor dw = Tensor::zeros(*d, {s.weight_numel()});
          const Tensor workspace =
              Tensor::zeros(*d, {int64_t(d->conv2d_workspace_bytes(s))}, DType::u8);
          auto step = [&] {
            d->conv2d_forward(s, x, w, Tensor(), y, workspace);
            d->conv2d_backward(s, x, w, dy, dx, dw, Tensor(), workspace, true);
            d->join_beside();
          };
          step();
          const std::vector<float> eager_dw = dw.to_host(), eager_dx = dx.to_host();
          auto captured = d->capture(step);
          REQUIRE(captured != nullptr);
          d->fill(dw, 0.0f);
          d->fill(dx, 0.0f);
          captured->replay();
          CHECK(dw.to_host() == eager_dw);
          CHECK(dx.to_host() == eager_dx);
        }
      }
    }
  }
}

// Per-queue scratch: batch norms of few channels and long runs (partial statistics in the
// reduction scratch) and long-K GEMMs (split-K partial products) queued beside the same ops on
// the main queue, over and over, must give exactly what they give in order. A side queue that
// shared the main queue's scratch would let one queue's partials overwrite the other's.
TEST_CASE("conformance: reductions and split GEMMs beside the same ops keep their own scratch",
          "[conformance][overlap]") {
  for (Device* d : trident::testing::devices_under_test()) {
    if (!d->side_queue_runs_every_op()) continue;
    DYNAMIC_SECTION(d->info().id()) {
      BatchNormShape s;
      s.outer = 64, s.channels = 2, s.inner = 1024;  // 65536 values a channel: many pieces
      const int64_t m = 32, n = 10, k = 4096;         // long K, small C: split along K
      struct Lane {
        Tensor x, dy, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, dx,
            dgamma, dbeta, a, b, c;
      };
      auto lane = [&](uint32_t seed) {
        Lane l;
        const Shape shape{s.outer, s.channels, s.inner};
        const size_t values = size_t(s.numel());
        l.x = Tensor::from_host(*d, shape, trident::testing::random_floats(values, seed, 2, 5));
        l.dy = Tensor::from_host(*d, shape, trident::testing::random_floats(values, seed + 1));
        l.gamma = Tensor::from_host(*d, {2}, std::vector<float>{0.5f, 2.0f});
        l.beta = Tensor::from_host(*d, {2}, std::vector<float>{0.1f, -0.3f});
        l.running_mean = Tensor::zeros(*d, {2});
        l.running_var = Tensor::from_host(*d, {2}, std::vector<float>{1.0f, 1.0f});
        l.y = Tensor::zeros(*d, shape), l.dx = Tensor::zeros(*d, shape);
        l.save_mean = Tensor::zeros(*d, {2}), l.save_invstd = Tensor::zeros(*d, {2});
        l.dgamma = Tensor::zeros(*d, {2}), l.dbeta = Tensor::zeros(*d, {2});
        l.a = Tensor::from_host(*d, {m, k}, trident::testing::random_floats(m * k, seed + 2));
        l.b = Tensor::from_host(*d, {k, n}, trident::testing::random_floats(k * n, seed + 3));
        l.c = Tensor::zeros(*d, {m, n});
        return l;
      };
      auto work = [&](Lane& l) {
        d->batchnorm_forward(s, true, l.x, l.gamma, l.beta, l.running_mean, l.running_var, l.y,
                             l.save_mean, l.save_invstd);
        d->batchnorm_backward(s, l.x, l.dy, l.gamma, l.save_mean, l.save_invstd, l.dx, l.dgamma,
                              l.dbeta);
        GemmArgs g;
        g.m = m, g.n = n, g.k = k, g.a = l.a, g.b = l.b, g.c = l.c, g.lda = k, g.ldb = n,
        g.ldc = n;
        g.beta = 1.0f;  // accumulates: every round's product counts
        d->gemm(g);
      };
      auto results = [](const Lane& l) {
        std::vector<std::vector<float>> r;
        for (const Tensor* t : {&l.y, &l.dx, &l.dgamma, &l.dbeta, &l.running_mean,
                                &l.running_var, &l.c})
          r.push_back(t->to_host());
        return r;
      };
      // How many elements of each result differ (a count, not the 65536-element vectors).
      auto differing = [](const std::vector<std::vector<float>>& got,
                          const std::vector<std::vector<float>>& want) {
        std::vector<size_t> counts;
        for (size_t i = 0; i < got.size(); ++i) {
          size_t count = 0;
          for (size_t j = 0; j < got[i].size(); ++j) count += got[i][j] != want[i][j];
          counts.push_back(count);
        }
        return counts;
      };
      const std::vector<size_t> none(7, 0);  // y, dx, dgamma, dbeta, running mean / var, gemm
      constexpr int kRounds = 12;
      Lane first = lane(1), second = lane(7);
      for (int i = 0; i < kRounds; ++i) {
        work(first);
        work(second);
      }
      const auto want_first = results(first), want_second = results(second);
      // Once in order first: the shapes' scratch grows where allocating is allowed.
      Lane beside = lane(1), main = lane(7);
      for (int i = 0; i < kRounds; ++i) {
        if (i == 0) {
          work(beside);
        } else {
          d->queue_beside([&] { work(beside); });
        }
        work(main);
        if (i % 4 == 3) d->join_beside();  // several rounds in flight on both queues
      }
      d->join_beside();
      CHECK(differing(results(beside), want_first) == none);
      CHECK(differing(results(main), want_second) == none);
    }
  }
}
