// fp16 dynamic loss scaling, from the ops to the trainer: sgd_update and adam_update with
// UpdateControl::loss_scale give the update of the pre-divided gradients, a non-finite gradient
// norm skips the update bit for bit, update_loss_scale backs off and grows as GradScaler does,
// a captured step replays with the scale as it changes; a Trainer in fp16 from an absurd scale
// skips the overflowed steps and then trains like fp32, and checkpoints keep the scaler so that
// a resumed run equals an uninterrupted one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/safetensors.h"
#include "trident/kernels/reference/reference_ops.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/conformance.h"
#include "tests/dtype_check.h"
#include "tests/fake_collective.h"
#include "tests/test_data.h"
#include "tests/test_files.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Whether the device trains in float16: it holds the type and its loss scaler runs (the default
// slot refuses). The probe leaves nothing behind.
bool trains_fp16(Device& d) {
  if (!d.supports(DType::f16)) return false;
  try {
    Tensor state = Tensor::from_host(d, {2}, std::vector<float>{1.0f, 0.0f});
    d.update_loss_scale(state, Tensor::zeros(d, {1}), {});
    d.synchronize();
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

// The devices under test that train in float16 (the others WARN), and the float64 test double.
std::vector<Device*> fp16_training_devices() {
  static std::set<std::string> warned;
  std::vector<Device*> out;
  for (Device* d : devices_under_test()) {
    if (trains_fp16(*d))
      out.push_back(d);
    else if (warned.insert(d->info().id()).second)
      WARN("SKIPPED " << d->info().id() << ": it does not train in float16");
  }
  if (!std::getenv("TRIDENT_TEST_BACKENDS")) out.push_back(&half_reference_device());
  return out;
}

#define FOR_EACH_FP16_DEVICE(device_var)                       \
  for (::trident::Device* device_var : fp16_training_devices()) \
  DYNAMIC_SECTION(device_var->info().id())

// An update (p_new - p_old) within two float ulps of p plus a relative error of the update, as
// the float32 optimizer conformance tests allow.
Tolerance update_tolerance(const std::vector<float>& p_old, double relative) {
  float max_abs = 0.0f;
  for (float v : p_old) max_abs = std::max(max_abs, std::abs(v));
  return {2.0 * double(max_abs) * 1.2e-7, relative};
}

std::vector<float> difference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = float(double(a[i]) - double(b[i]));
  return d;
}

float sum_of_squares(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += double(x) * x;
  return float(s);
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * 4);  // null data when empty
  return out;
}

std::vector<float> times(const std::vector<float>& v, float f) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * f;
  return out;
}

// One optimizer under test: SGD (state0 = momentum) or Adam (state0 = m, state1 = v).
struct Optim {
  bool adam;
  SgdParams sgd;
  AdamParams adam_hp;
};

void run_update(Device& d, const Optim& o, const Tensor& p, const Tensor& g, const Tensor& s0,
                const Tensor& s1, const UpdateControl& c, const Tensor& state) {
  if (o.adam)
    d.adam_update(p, g, s0, s1, o.adam_hp, c, state);
  else
    d.sgd_update(p, g, s0, o.sgd, c, state);
}

void reference_update(const Optim& o, std::vector<float>& p, const std::vector<float>& g,
                      std::vector<float>& s0, std::vector<float>& s1,
                      const reference::HostUpdateControl& c, const std::vector<uint32_t>& state) {
  if (o.adam)
    reference::adam_update(p.data(), g.data(), s0.data(), s1.data(), int64_t(p.size()), o.adam_hp,
                           state.data(), c);
  else
    reference::sgd_update(p.data(), g.data(), s0.data(), int64_t(p.size()), o.sgd, c, state.data());
}

std::vector<Optim> optimizers() {
  Optim heavy{false, {}, {}};
  heavy.sgd.lr = 0.05f; heavy.sgd.momentum = 0.9f; heavy.sgd.weight_decay = 0.01f;
  Optim nesterov{false, {}, {}};
  nesterov.sgd.lr = 0.1f; nesterov.sgd.momentum = 0.5f; nesterov.sgd.nesterov = true;
  nesterov.sgd.grad_scale = 0.5f;
  Optim adam{true, {}, {}};
  adam.adam_hp.lr = 1e-3f; adam.adam_hp.weight_decay = 0.05f;
  Optim adamw{true, {}, {}};
  adamw.adam_hp.lr = 5e-4f; adamw.adam_hp.weight_decay = 0.1f; adamw.adam_hp.decoupled_weight_decay = true;
  adamw.adam_hp.grad_scale = 0.25f;
  return {heavy, nesterov, adam, adamw};
}

}  // namespace

TEST_CASE("loss scaling: the float64 reference divides by the loss scale, skips a non-finite "
          "step, and clips only for max_norm > 0", "[loss_scaling][reference]") {
  const std::vector<float> g = random_floats(64, 1), p0 = random_floats(64, 2);
  for (const Optim& o : optimizers()) {
    std::vector<float> p_scaled = p0, p_plain = p0, a0(64, 0.0f), a1(64, 0.0f), b0(64, 0.0f), b1(64, 0.0f);
    const std::vector<float> scaled = times(g, 1024.0f);
    const float scale = 1024.0f, sumsq = sum_of_squares(scaled);
    reference::HostUpdateControl c;
    c.grad_sumsq = &sumsq;
    c.loss_scale = &scale;  // max_norm 0: no clipping
    reference_update(o, p_scaled, scaled, a0, a1, c, {0, 0});
    reference_update(o, p_plain, g, b0, b1, {}, {0, 0});
    CHECK(p_scaled == p_plain);
    const float inf = kInf;
    c.grad_sumsq = &inf;
    std::vector<float> p_skipped = p0;
    reference_update(o, p_skipped, scaled, a0, a1, c, {1, 1});
    CHECK(p_skipped == p0);
  }
  float state[2] = {65536.0f, 0.0f};
  LossScaleParams params;
  params.interval = 2;
  reference::update_loss_scale(state, 1.0f, params);
  CHECK((state[0] == 65536.0f && state[1] == 1.0f));
  reference::update_loss_scale(state, 1.0f, params);
  CHECK((state[0] == 131072.0f && state[1] == 0.0f));
  reference::update_loss_scale(state, NAN, params);
  CHECK((state[0] == 65536.0f && state[1] == 0.0f));
}

TEST_CASE("loss scaling: sgd_update and adam_update with a loss scale equal the update of the "
          "pre-divided gradients (with and without clipping) and the float64 reference",
          "[loss_scaling][sgd][adam]") {
  FOR_EACH_FP16_DEVICE(device) {
    uint32_t seed = 5100;
    for (const int64_t n : {7, 257, 10007})
      for (const Optim& o : optimizers())
        for (const float scale : {1024.0f, 3000.0f})
          for (const float max_norm : {0.0f, 0.5f}) {
            INFO("n=" << n << " adam=" << o.adam << " scale=" << scale << " max_norm=" << max_norm);
            const std::vector<float> p0 = o.adam ? random_floats(size_t(n), ++seed, -2e-3f, 2e-3f)
                                                 : random_floats(size_t(n), ++seed);
            const size_t count = size_t(n);
            Tensor scaled_p = upload(*device, p0), plain_p = upload(*device, p0);
            Tensor scaled_s0 = Tensor::zeros(*device, {n}), scaled_s1 = Tensor::zeros(*device, {n});
            Tensor plain_s0 = Tensor::zeros(*device, {n}), plain_s1 = Tensor::zeros(*device, {n});
            std::vector<float> ref_p = p0, ref_s0(count, 0.0f), ref_s1(count, 0.0f);
            Tensor state = upload(*device, std::vector<uint32_t>{0, 0});
            Tensor loss_scale = upload(*device, std::vector<float>{scale});
            for (uint32_t step = 0; step < 3; ++step) {
              INFO("step " << step);
              const std::vector<float> g = random_floats(count, ++seed);
              const std::vector<float> scaled = times(g, scale);
              std::vector<float> pre_divided(count);
              for (size_t i = 0; i < count; ++i) pre_divided[i] = scaled[i] / scale;
              UpdateControl with_scale;
              with_scale.grad_sumsq = upload(*device, std::vector<float>{sum_of_squares(scaled)});
              with_scale.loss_scale = loss_scale;
              with_scale.max_norm = max_norm;
              UpdateControl without;
              if (max_norm > 0.0f) {
                without.grad_sumsq = upload(*device, std::vector<float>{sum_of_squares(pre_divided)});
                without.max_norm = max_norm;
              }
              const std::vector<float> before = scaled_p.to_host();
              run_update(*device, o, scaled_p, upload(*device, scaled), scaled_s0, scaled_s1, with_scale, state);
              run_update(*device, o, plain_p, upload(*device, pre_divided), plain_s0, plain_s1, without, state);
              device->advance_step(state);
              TRIDENT_CHECK_CLOSE(difference(scaled_p.to_host(), before),
                                  difference(plain_p.to_host(), before), update_tolerance(before, 5e-6));
              // The float64 reference with the same loss scale, from the device's own state.
              const std::vector<float> got = scaled_p.to_host();
              ref_p = before;
              const float sumsq = sum_of_squares(scaled);
              reference::HostUpdateControl hc;
              hc.grad_sumsq = &sumsq;
              hc.loss_scale = &scale;
              hc.max_norm = max_norm;
              reference_update(o, ref_p, scaled, ref_s0, ref_s1, hc, {step, step});
              TRIDENT_CHECK_CLOSE(difference(got, before), difference(ref_p, before),
                                  update_tolerance(before, 5e-6));
              ref_s0 = scaled_s0.to_host();
              if (o.adam) ref_s1 = scaled_s1.to_host();
            }
          }
  }
}

TEST_CASE("loss scaling: an infinite or NaN gradient norm skips the update bit for bit "
          "(parameters, momentum, m, v), and the step counters still advance",
          "[loss_scaling][skip]") {
  FOR_EACH_FP16_DEVICE(device) {
    uint32_t seed = 5200;
    for (const Optim& o : optimizers())
      for (const float bad : {kInf, std::numeric_limits<float>::quiet_NaN()}) {
        INFO("adam=" << o.adam << " grad_sumsq=" << bad);
        const int64_t n = 1031;
        Tensor p = upload(*device, random_floats(size_t(n), ++seed));
        Tensor s0 = upload(*device, random_floats(size_t(n), ++seed, -0.1f, 0.1f));
        Tensor s1 = upload(*device, random_floats(size_t(n), ++seed, 0.0f, 0.01f));
        const std::vector<float> p_before = p.to_host(), s0_before = s0.to_host(), s1_before = s1.to_host();
        std::vector<float> grads = times(random_floats(size_t(n), ++seed), 65536.0f);
        grads[7] = bad;  // what made the norm non-finite
        UpdateControl c;
        c.grad_sumsq = upload(*device, std::vector<float>{bad});
        c.loss_scale = upload(*device, std::vector<float>{65536.0f});
        Tensor state = upload(*device, std::vector<uint32_t>{3, 3});
        run_update(*device, o, p, upload(*device, grads), s0, s1, c, state);
        CHECK(bits_of(p.to_host()) == bits_of(p_before));
        CHECK(bits_of(s0.to_host()) == bits_of(s0_before));
        if (o.adam) CHECK(bits_of(s1.to_host()) == bits_of(s1_before));
        // The next, clean step runs as step 4 (Adam's t = 5): the skipped one was counted.
        device->advance_step(state);
        grads[7] = 1.0f;
        const float sumsq = sum_of_squares(grads), scale = 65536.0f;
        c.grad_sumsq = upload(*device, std::vector<float>{sumsq});
        run_update(*device, o, p, upload(*device, grads), s0, s1, c, state);
        std::vector<float> ref_p = p_before, ref_s0 = s0_before, ref_s1 = s1_before;
        reference::HostUpdateControl hc;
        hc.grad_sumsq = &sumsq;
        hc.loss_scale = &scale;
        reference_update(o, ref_p, grads, ref_s0, ref_s1, hc, {4, 4});
        TRIDENT_CHECK_CLOSE(difference(p.to_host(), p_before), difference(ref_p, p_before),
                            update_tolerance(p_before, 5e-6));
      }
  }
}

TEST_CASE("loss scaling: update_loss_scale backs off and resets on a non-finite norm and grows "
          "after `interval` clean steps, as the reference does", "[loss_scaling][scaler]") {
  FOR_EACH_FP16_DEVICE(device) {
    LossScaleParams params;
    params.growth = 4.0f;
    params.backoff = 0.25f;
    params.interval = 3;
    float want[2] = {1024.0f, 0.0f};
    Tensor state = upload(*device, std::vector<float>{want[0], want[1]});
    Tensor sumsq = Tensor::zeros(*device, {1});
    const float sequence[] = {1.0f, 2.0f, kInf, 5.0f, std::numeric_limits<float>::quiet_NaN(),
                              1.0f, 1e30f, 0.0f, 1.0f, 3.0f, -kInf, 1.0f};
    for (const float s : sequence) {
      INFO("grad_sumsq " << s);
      sumsq.copy_from_host(&s, 4);
      device->update_loss_scale(state, sumsq, params);
      reference::update_loss_scale(want, s, params);
      CHECK(state.to_host() == std::vector<float>{want[0], want[1]});
    }
    CHECK(want[0] == 64.0f);  // three backoffs and one growth: the sequence met both
    LossScaleParams bad = params;
    bad.growth = 0.5f;
    CHECK_THROWS_WITH(device->update_loss_scale(state, sumsq, bad), Catch::Contains("growth must be >= 1"));
    bad = params;
    bad.backoff = 1.0f;
    CHECK_THROWS_WITH(device->update_loss_scale(state, sumsq, bad), Catch::Contains("backoff must be in (0, 1)"));
    bad = params;
    bad.interval = 0;
    CHECK_THROWS_WITH(device->update_loss_scale(state, sumsq, bad), Catch::Contains("interval must be at least 1"));
  }
}

TEST_CASE("loss scaling: a captured step replays with the scale as it changes (skipped "
          "overflows, backoff, growth) like eager execution", "[loss_scaling][capture]") {
  std::vector<Device*> devices;
  for (Device* d : fp16_training_devices())
    if (d != &half_reference_device()) devices.push_back(d);
  ReplayingCpuDevice replaying(7);  // records the step, replays it by running it again
  devices.push_back(&replaying);
  for (Device* device : devices) {
    DYNAMIC_SECTION(device->info().id() << (device == &replaying ? " (replaying test double)" : "")) {
      const int64_t n = 513;
      const std::vector<float> p0 = random_floats(size_t(n), 5300);
      Tensor params = upload(*device, p0), momentum = Tensor::zeros(*device, {n});
      Tensor grads = Tensor::zeros(*device, {n}), sumsq = Tensor::zeros(*device, {1});
      Tensor scaler = upload(*device, std::vector<float>{4096.0f, 0.0f});
      Tensor step_state = upload(*device, std::vector<uint32_t>{0, 0});
      SgdParams hp;
      hp.lr = 0.05f;
      hp.momentum = 0.9f;
      LossScaleParams lp;
      lp.interval = 2;
      UpdateControl control;
      control.grad_sumsq = sumsq;
      control.loss_scale = scaler.view(0, {1});
      auto step = [&] {
        device->channel_sums(grads, grads, sumsq, 1, 1, n, 0.0f);
        device->sgd_update(params, grads, momentum, hp, control, step_state);
        device->update_loss_scale(scaler, sumsq, lp);
        device->advance_step(step_state);
      };
      // The host's copy of the same run, through the float64 reference.
      std::vector<float> ref_p = p0, ref_m(size_t(n), 0.0f);
      float ref_scaler[2] = {4096.0f, 0.0f};
      std::unique_ptr<CapturedWork> captured;
      const bool overflow[] = {false, false, false, true, false, true, true, false, false, false};
      bool replayed_all = true;
      for (size_t k = 0; k < std::size(overflow); ++k) {
        INFO("step " << k << (overflow[k] ? " (overflow)" : ""));
        std::vector<float> g = times(random_floats(size_t(n), uint32_t(5400 + k)), ref_scaler[0]);
        if (overflow[k]) g[size_t(k * 31) % size_t(n)] = kInf;
        grads.copy_from_host(g.data(), g.size() * 4);
        const std::vector<float> before = params.to_host();
        if (k == 0) {
          step();  // eager: sizes every buffer
        } else {
          if (!captured) captured = device->capture(step);
          if (!captured) {
            WARN("SKIPPED " << device->info().id() << ": no capture (Device::capture returned null)");
            replayed_all = false;
            break;
          }
          captured->replay();
        }
        const float s = sum_of_squares(g);
        const float scale_used = ref_scaler[0];
        reference::HostUpdateControl hc;
        hc.grad_sumsq = &s;
        hc.loss_scale = &scale_used;
        reference::sgd_update(ref_p.data(), g.data(), ref_m.data(), n, hp, hc,
                              std::vector<uint32_t>{uint32_t(k), uint32_t(k)}.data());
        reference::update_loss_scale(ref_scaler, s, lp);
        CHECK(scaler.to_host() == std::vector<float>{ref_scaler[0], ref_scaler[1]});
        const std::vector<float> after = params.to_host();
        if (overflow[k]) CHECK(bits_of(after) == bits_of(before));
        TRIDENT_CHECK_CLOSE(difference(after, before), difference(ref_p, before),
                            update_tolerance(before, 5e-6));
        ref_p = after;  // the next step starts from the device's state
        ref_m = momentum.to_host();
      }
      if (!replayed_all) continue;
      CHECK(ref_scaler[0] == 2048.0f);  // growths at steps 1 and 8, backoffs at 3, 5 and 6
      if (device == &replaying) CHECK(*replaying.replays == int(std::size(overflow)) - 1);
    }
  }
}

namespace {

struct TrainedRun {
  std::vector<float> params;
  std::vector<double> losses;
  float loss_scale = 0.0f;
};

TrainOptions fp16_options(float initial_scale) {
  TrainOptions o;
  o.batch = 100;
  o.precision = Precision::fp16;
  o.initial_loss_scale = initial_scale;
  return o;
}

}  // namespace

TEST_CASE("loss scaling: a Trainer in fp16 from a loss scale of 2^40 skips the overflowed "
          "steps, backs off, then trains as fp32 does", "[loss_scaling][training]") {
  const DatasetSplits data = small_splits(400, 200);  // 4 steps per epoch
  for (Device* device : fp16_training_devices()) {
    if (device == &half_reference_device()) continue;  // float64 loops: too slow for 120 steps
    DYNAMIC_SECTION(device->info().id()) {
      Trainer fp16({device}, [] { return make_seed_mlp(); }, data, fp16_options(std::ldexp(1.0f, 40)));
      REQUIRE(fp16.precision() == Precision::fp16);
      const std::vector<float> initial = fp16.network().parameters().to_host();
      // dlogits = 2^40 (p - t) / 100 is past float16's 65504 until the scale is below about
      // 2^23: the whole first epoch overflows, and nothing moves.
      const EpochStats first = fp16.train_epoch();
      CHECK(std::isfinite(first.train_loss));
      CHECK(bits_of(fp16.network().parameters().to_host()) == bits_of(initial));
      CHECK(fp16.loss_scale() == std::ldexp(1.0f, 36));
      TrainOptions o32;
      o32.batch = 100;
      o32.precision = Precision::fp32;
      Trainer fp32({device}, [] { return make_seed_mlp(); }, data, o32);
      std::vector<double> losses16, losses32;
      for (int epoch = 1; epoch <= 30; ++epoch) {
        if (epoch > 1) losses16.push_back(fp16.train_epoch().train_loss);
        losses32.push_back(fp32.train_epoch().train_loss);
      }
      const float scale = fp16.loss_scale();
      int exponent = 0;
      CHECK(std::frexp(scale, &exponent) == 0.5f);  // halvings only: growth needs 2000 clean steps
      const int skipped = 40 - (exponent - 1);
      INFO("skipped " << skipped << " of 120 steps; final scale 2^" << exponent - 1
                      << "; final train loss fp16 " << losses16.back() << ", fp32 " << losses32.back());
      CHECK(skipped >= 17);  // down to 2^23 at least
      CHECK(skipped <= 30);  // and then it trained: a quarter of the run at most was lost
      // The fp16 run made 120 - skipped updates: its loss lies between the fp32 run's after as
      // many epochs as the skipped steps cost and the fp32 run's at the end, within the
      // rounding effect of float16 activations (5%).
      const size_t lost_epochs = size_t((skipped + 3) / 4);
      const double upper = losses32[losses32.size() - 1 - lost_epochs] * 1.05;
      const double lower = losses32.back() * 0.95;
      CHECK(losses16.back() <= upper);
      CHECK(losses16.back() >= lower);
      CHECK(losses16.back() < 0.5 * first.train_loss);
      const EvalStats e16 = fp16.evaluate(), e32 = fp32.evaluate();
      CHECK(std::abs(e16.accuracy - e32.accuracy) < 0.05);
    }
  }
}

TEST_CASE("loss scaling: a captured fp16 training step replays the scaler: captured training "
          "equals eager training bit for bit", "[loss_scaling][capture][training]") {
  const DatasetSplits data = small_splits(400, 100);
  ReplayingCpuDevice captured_device(3), eager_device(4);
  TrainOptions o = fp16_options(std::ldexp(1.0f, 27));  // the first replays overflow
  Trainer captured({&captured_device}, [] { return make_seed_cnn(); }, data, o);
  o.capture = false;
  Trainer eager({&eager_device}, [] { return make_seed_cnn(); }, data, o);
  for (int epoch = 0; epoch < 3; ++epoch) {
    const double a = captured.train_epoch().train_loss, b = eager.train_epoch().train_loss;
    CHECK(a == b);
  }
  CHECK(captured_device.captures == 1);
  CHECK(*captured_device.replays == 11);
  CHECK(eager_device.captures == 0);
  CHECK(captured.loss_scale() == eager.loss_scale());
  CHECK(captured.loss_scale() < std::ldexp(1.0f, 27));
  CHECK(bits_of(captured.network().parameters().to_host()) ==
        bits_of(eager.network().parameters().to_host()));
}

TEST_CASE("loss scaling: a checkpoint keeps the scaler (optimizer.grad_scaler) and a resumed "
          "fp16 run equals an uninterrupted one exactly", "[loss_scaling][checkpoint]") {
  const DatasetSplits data = small_splits(400, 100);
  ScratchDir dir("loss-scaling");
  // From 2^24 the first steps overflow and later ones are clean: both counters are in play.
  const TrainOptions o = fp16_options(std::ldexp(1.0f, 24));
  Device& cpu = DeviceRegistry::global().device("cpu:0");
  auto model = [] { return make_seed_cnn(); };
  Trainer straight({&cpu}, model, data, o);
  for (int e = 0; e < 3; ++e) straight.train_epoch();
  Trainer first({&cpu}, model, data, o);
  first.train_epoch();
  const std::string path = dir.file("fp16.safetensors");
  first.save_checkpoint(path);
  const TensorFile file = load_safetensors(path);
  CHECK(file.metadata.at("precision") == "fp16");
  const HostTensor* scaler = nullptr;
  for (const HostTensor& t : file.tensors)
    if (t.name == "optimizer.grad_scaler") scaler = &t;
  REQUIRE(scaler != nullptr);
  CHECK(scaler->dtype == DType::f32);
  CHECK(scaler->shape == Shape{2});
  float saved[2];
  std::memcpy(saved, scaler->bytes.data(), 8);
  CHECK(saved[0] == first.loss_scale());
  CHECK(saved[0] < std::ldexp(1.0f, 24));

  Trainer resumed({&cpu}, model, data, o);
  resumed.load_checkpoint(path);
  CHECK(resumed.loss_scale() == saved[0]);
  resumed.train_epoch();
  resumed.train_epoch();
  CHECK(resumed.loss_scale() == straight.loss_scale());
  CHECK(bits_of(resumed.network().parameters().to_host()) ==
        bits_of(straight.network().parameters().to_host()));
  CHECK(bits_of(resumed.network().buffers().defined() ? resumed.network().buffers().to_host() : std::vector<float>{}) ==
        bits_of(straight.network().buffers().defined() ? straight.network().buffers().to_host() : std::vector<float>{}));

  // A checkpoint without a scaler (an fp32 run's) resumes in fp16 from the initial scale.
  TrainOptions o32 = o;
  o32.precision = Precision::fp32;
  Trainer plain({&cpu}, model, data, o32);
  plain.train_epoch();
  const std::string plain_path = dir.file("fp32.safetensors");
  plain.save_checkpoint(plain_path);
  Trainer from_plain({&cpu}, model, data, o);
  from_plain.load_checkpoint(plain_path);
  CHECK(from_plain.loss_scale() == std::ldexp(1.0f, 24));

  // A scaler that is not a positive finite scale is refused, naming the tensor, and nothing loads.
  TensorFile broken = file;
  for (HostTensor& t : broken.tensors)
    if (t.name == "optimizer.grad_scaler") {
      const float bad[2] = {-1.0f, 0.0f};
      std::memcpy(t.bytes.data(), bad, 8);
    }
  const std::string broken_path = dir.file("broken.safetensors");
  save_safetensors(broken_path, broken);
  Trainer victim({&cpu}, model, data, o);
  const std::vector<float> before = victim.network().parameters().to_host();
  CHECK_THROWS_WITH(victim.load_checkpoint(broken_path),
                    Catch::Contains("optimizer.grad_scaler") && Catch::Contains("positive and finite"));
  CHECK(victim.loss_scale() == std::ldexp(1.0f, 24));
  CHECK(bits_of(victim.network().parameters().to_host()) == bits_of(before));
}
