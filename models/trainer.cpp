// The training loop: resident data, per-epoch index tables, one (captured) step per batch,
// gradient all-reduce or periodic weight averaging across replicas, evaluation.
#include "trident/models/trainer.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/philox.h"
#include "trident/models/replica.h"
#include "trident/models/seed_models.h"

namespace trident {

namespace {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// The epoch's sample order: Fisher-Yates driven by Philox, the same on every machine.
std::vector<int32_t> epoch_permutation(int64_t count, uint64_t seed, int64_t epoch) {
  std::vector<int32_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = count - 1; i > 0; --i) {
    const uint64_t block = static_cast<uint64_t>(i);
    const uint32_t word = philox4x32_10(static_cast<uint32_t>(block), 0, 0xC0FFEEu,
                                        static_cast<uint32_t>(epoch), static_cast<uint32_t>(seed),
                                        static_cast<uint32_t>(seed >> 32)).v[0];
    const int64_t j = static_cast<int64_t>((static_cast<uint64_t>(word) * (block + 1)) >> 32);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace

Trainer::Trainer(std::vector<Device*> devices, TrainOptions options, const MnistSplits& data)
    : options_(std::move(options)) {
  if (devices.empty()) throw UsageError("no devices to train on");
  if (options_.process_count < 1 || options_.process_rank < 0 ||
      options_.process_rank >= options_.process_count)
    throw UsageError("process " + std::to_string(options_.process_rank) + " of " +
                     std::to_string(options_.process_count) + " does not exist");
  const int64_t n = static_cast<int64_t>(devices.size()) * options_.process_count;
  replica_count_ = n;
  if (options_.batch <= 0 || options_.batch % n != 0)
    throw UsageError("batch " + std::to_string(options_.batch) + " must be a positive multiple of the " +
                     std::to_string(n) + " devices");
  per_replica_batch_ = options_.batch / n;
  train_count_ = data.train.count;
  test_count_ = data.test.count;
  if (train_count_ < options_.batch)
    throw UsageError("the training set has " + std::to_string(train_count_) +
                     " samples, fewer than one batch of " + std::to_string(options_.batch));
  const Shape sample = model_sample_shape(options_.model);
  const int64_t pixels = shape_numel(sample);
  if (data.train.height * data.train.width != pixels)
    throw ShapeError("model '" + options_.model + "' expects " + shape_string(sample) +
                     " images, the data set has " + std::to_string(data.train.height) + "x" +
                     std::to_string(data.train.width));
  const int64_t steps = train_count_ / options_.batch;
  for (size_t rank = 0; rank < devices.size(); ++rank) {
    auto r = std::make_unique<Replica>();
    Device& d = *devices[rank];
    r->device = &d;
    r->rank = static_cast<size_t>(options_.process_rank) * devices.size() + rank;
    r->net = make_model(options_.model);
    r->net.build(d, sample, options_.seed);  // the same seed: every replica starts identical
    r->loss = make_loss("nll");
    r->optimizer = make_optimizer(options_.optimizer);
    r->optimizer->attach(r->net);
    r->train_images = Tensor::from_host(d, {train_count_, pixels}, data.train.images);
    r->train_labels = Tensor::from_host(d, {train_count_}, data.train.labels);
    r->test_images = Tensor::from_host(d, {test_count_, pixels}, data.test.images);
    r->test_labels = Tensor::from_host(d, {test_count_}, data.test.labels);
    r->index_table = Tensor::empty(d, {steps * per_replica_batch_}, DType::i32);
    r->step_state = Tensor::zeros(d, {2}, DType::i32);
    r->loss_sum = Tensor::zeros(d, {1});
    r->labels = Tensor::empty(d, {per_replica_batch_}, DType::i32);
    replicas_.push_back(std::move(r));
  }
  collective_ = options_.collective ? options_.collective(devices) : make_collective(devices);
  overlap_ = options_.overlap && env_flag("TRIDENT_OVERLAP", true) && collective_->overlaps() &&
             n > 1 && options_.average_every <= 0;
  bucket_bytes_ = options_.bucket_bytes > 0
                      ? options_.bucket_bytes
                      : env_int("TRIDENT_BUCKET_MB", 16, 1, 1 << 20) * (int64_t(1) << 20);
}

Trainer::~Trainer() = default;

Network& Trainer::network() { return replicas_.front()->net; }

std::string Trainer::device_names() const {
  std::string names;
  for (const auto& r : replicas_) names += (names.empty() ? "" : ",") + r->device->info().id();
  return names;
}

void Trainer::run_on_replicas(const std::function<void(Replica&)>& work) {
  if (replicas_.size() == 1) return work(*replicas_[0]);
  // One host thread per device: CPU devices compute synchronously, GPUs just get their queues fed.
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        work(*replicas_[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void Trainer::upload_epoch_tables(int64_t epoch) {
  const int64_t steps = train_count_ / options_.batch;
  const std::vector<int32_t> order = epoch_permutation(train_count_, options_.seed, epoch);
  for (auto& r : replicas_) {
    // Replica r takes samples [r*b, (r+1)*b) of every global batch.
    std::vector<int32_t> table(static_cast<size_t>(steps * per_replica_batch_));
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t i = 0; i < per_replica_batch_; ++i)
        table[static_cast<size_t>(s * per_replica_batch_ + i)] =
            order[static_cast<size_t>(s * options_.batch +
                                      static_cast<int64_t>(r->rank) * per_replica_batch_ + i)];
    r->index_table.copy_from_host(table.data(), table.size() * sizeof(int32_t));
    const uint32_t state[2] = {0u, static_cast<uint32_t>(global_step_)};
    r->step_state.copy_from_host(state, sizeof(state));
    r->device->fill(r->loss_sum.memory(), 1, 0.0f);
  }
}

StepContext Trainer::train_context(const Replica& r) const {
  return r.context(true, static_cast<int64_t>(r.rank) * per_replica_batch_, options_.seed);
}

// Gather the batch, forward, loss and its gradient: everything before the network's backward.
void Trainer::forward_replica(Replica& r) {
  const StepContext ctx = train_context(r);
  const Tensor& input = r.net.input_buffer(per_replica_batch_);
  const size_t row_bytes = static_cast<size_t>(r.train_images.dim(1)) * sizeof(float);
  r.device->gather_rows(r.train_images.memory(), row_bytes, r.index_table.memory(),
                        per_replica_batch_, r.step_state.memory(), input.memory());
  r.device->gather_rows(r.train_labels.memory(), sizeof(int32_t), r.index_table.memory(),
                        per_replica_batch_, r.step_state.memory(), r.labels.memory());
  // Training fuses the NLL loss (r.loss, which evaluation uses) into the head when it can.
  r.net.forward_nll(ctx, input, r.labels, r.loss_sum, true);
}

// Everything before the gradients are combined.
void Trainer::step_replica(Replica& r) {
  forward_replica(r);
  r.net.backward(train_context(r));
}

// Backward through every replica's network layer by layer from the top (one host thread queues
// all of it: GPU calls return at once), starting the sum of each bucket of finished gradients
// while the layers below are still being differentiated. Parameters lie in layer order, so the
// finished gradients are always the buffer's tail [begin of the last layer done, count): a
// bucket is its part not yet started. finish_all_reduces joins the sums before the update.
void Trainer::backward_in_buckets() {
  const Network& first = replicas_[0]->net;
  std::vector<StepContext> contexts;
  for (auto& r : replicas_) contexts.push_back(train_context(*r));
  int64_t unsummed_end = first.parameter_count();  // gradients at and past it are started
  std::vector<DeviceMemory> bucket(replicas_.size());
  for (size_t i = first.layer_count(); i-- > 0;) {
    for (size_t k = 0; k < replicas_.size(); ++k)
      replicas_[k]->net.backward_layer_parameters(contexts[k], i);
    const int64_t begin = first.layer_parameters(i).begin;
    const int64_t count = unsummed_end - begin;
    if (count > 0 && (count * int64_t(sizeof(float)) >= bucket_bytes_ || i == 0)) {
      for (size_t k = 0; k < replicas_.size(); ++k)
        bucket[k] = replicas_[k]->net.gradients().memory().at(static_cast<size_t>(begin) *
                                                              sizeof(float));
      collective_->start_all_reduce_sum(bucket, count);
      unsummed_end = begin;
    }
    // dx of layer i: queued after the bucket's start, so the sum runs beside it.
    for (size_t k = 0; k < replicas_.size(); ++k)
      replicas_[k]->net.backward_layer_input(contexts[k], i);
  }
  collective_->finish_all_reduces();
}

void Trainer::average_replicas() {
  const float scale = 1.0f / static_cast<float>(replica_count_);
  auto average = [&](const std::function<Tensor(Replica&)>& pick) {
    std::vector<DeviceMemory> buffers;
    for (auto& r : replicas_) buffers.push_back(pick(*r).memory());
    const int64_t count = pick(*replicas_[0]).numel();
    collective_->all_reduce_sum(buffers, count);
    for (auto& r : replicas_) r->device->axpby(pick(*r).memory(), pick(*r).memory(), count, 0.0f, scale);
  };
  average([](Replica& r) { return r.net.parameters(); });
  const size_t states = replicas_[0]->optimizer->state().size();
  for (size_t k = 0; k < states; ++k)
    average([k](Replica& r) { return r.optimizer->state()[k].second; });
}

EpochStats Trainer::train_epoch(const std::function<void(const Progress&)>& on_progress,
                                double interval) {
  const int64_t epoch = epochs_done_ + 1;
  const int64_t steps = train_count_ / options_.batch;
  const size_t n = replicas_.size();
  const bool all_reduce = options_.average_every <= 0;
  const float grad_scale = all_reduce ? 1.0f / static_cast<float>(replica_count_) : 1.0f;
  // One local replica records its whole step, the all-reduce included when there are other
  // processes and their collective can be captured (NCCL), bucketed sums too: their streams
  // fork from and join the recorded stream. Several local replicas driven from one thread run
  // their bucketed steps eagerly (each device's graph would hold one side of a cross-device
  // NCCL group; not attempted).
  const bool bucketed = all_reduce && overlap_;
  const bool whole_step_local =
      n == 1 && (replica_count_ == 1 || (all_reduce && collective_->capturable()));
  upload_epoch_tables(epoch);
  for (auto& r : replicas_) r->device->synchronize();
  const double start = now_seconds();
  double last_report = start;
  for (int64_t s = 0; s < steps; ++s) {
    if (whole_step_local) {
      Replica& r = *replicas_[0];
      auto whole_step = [&] {
        if (bucketed) {
          forward_replica(r);
          backward_in_buckets();
        } else {
          step_replica(r);
          if (replica_count_ > 1)
            collective_->all_reduce_sum({r.net.gradients().memory()}, r.net.parameter_count());
        }
        r.optimizer->step(r.context(true, 0, options_.seed), grad_scale);
        r.device->advance_step(r.step_state.memory());
      };
      // The first step runs eagerly (it allocates every buffer); the second is captured once.
      if (r.captured) {
        r.captured->replay();
      } else if (options_.capture && !r.capture_tried && s > 0) {
        r.capture_tried = true;
        r.captured = r.device->capture(whole_step);
        if (r.captured) r.captured->replay(); else whole_step();
      } else {
        whole_step();
      }
    } else if (bucketed) {  // one thread queues every device's step
      for (auto& r : replicas_) forward_replica(*r);
      backward_in_buckets();
      for (auto& r : replicas_) {
        r->optimizer->step(r->context(true, 0, options_.seed), grad_scale);
        r->device->advance_step(r->step_state.memory());
      }
    } else {
      run_on_replicas([&](Replica& r) { step_replica(r); });
      if (all_reduce) {
        std::vector<DeviceMemory> grads;
        for (auto& r : replicas_) grads.push_back(r->net.gradients().memory());
        collective_->all_reduce_sum(grads, replicas_[0]->net.parameter_count());
      }
      run_on_replicas([&](Replica& r) {
        r.optimizer->step(r.context(true, 0, options_.seed), grad_scale);
        r.device->advance_step(r.step_state.memory());
      });
      if (!all_reduce && (global_step_ + 1) % options_.average_every == 0) average_replicas();
    }
    ++global_step_;
    const double t = now_seconds();
    if (on_progress && t - last_report >= interval) {
      last_report = t;
      float loss_sum = 0.0f;
      replicas_[0]->device->copy_to_host(&loss_sum, replicas_[0]->loss_sum.memory(), sizeof(float));
      on_progress({s + 1, steps, loss_sum / static_cast<double>(s + 1), t - start});
    }
  }
  if (!all_reduce && global_step_ % options_.average_every != 0) average_replicas();
  double loss_sum = 0.0;  // the mean over replicas of their batch-loss sums; reading waits
  if (options_.process_count > 1) {  // every process reports the mean over all processes
    std::vector<DeviceMemory> sums;
    for (auto& r : replicas_) sums.push_back(r->loss_sum.memory());
    collective_->all_reduce_sum(sums, 1);
    float total = 0.0f;
    replicas_[0]->device->copy_to_host(&total, replicas_[0]->loss_sum.memory(), sizeof(float));
    loss_sum = total / static_cast<double>(replica_count_);
  } else {
    for (auto& r : replicas_) {
      float replica_sum = 0.0f;
      r->device->copy_to_host(&replica_sum, r->loss_sum.memory(), sizeof(float));
      loss_sum += replica_sum / static_cast<double>(n);
    }
  }
  EpochStats stats;
  stats.epoch = epoch;
  stats.steps = steps;
  stats.seconds = now_seconds() - start;
  stats.train_loss = loss_sum / static_cast<double>(steps);
  stats.samples_per_s = static_cast<double>(steps * options_.batch) / stats.seconds;
  epochs_done_ = epoch;
  if (on_progress) on_progress({steps, steps, stats.train_loss, stats.seconds});
  return stats;
}

EvalStats Trainer::evaluate() {
  Replica& r = *replicas_[0];
  Device& d = *r.device;
  Tensor correct = Tensor::zeros(d, {1});
  Tensor loss_sum = Tensor::zeros(d, {1});
  Tensor batch_loss = Tensor::zeros(d, {1});
  const int64_t pixels = r.test_images.dim(1);
  const Shape sample = r.net.sample_shape();
  for (int64_t begin = 0; begin < test_count_; begin += options_.eval_batch) {
    const int64_t rows = std::min(options_.eval_batch, test_count_ - begin);
    Shape shape{rows};
    shape.insert(shape.end(), sample.begin(), sample.end());
    const Tensor input = r.test_images.view(begin * pixels, shape);
    const Tensor labels = r.test_labels.view(begin, {rows});
    const StepContext ctx = r.context(false, 0, options_.seed);
    const Tensor& out = r.net.forward(ctx, input);
    r.loss->forward(ctx, out, labels, batch_loss, false);
    d.axpby(batch_loss.memory(), loss_sum.memory(), 1, static_cast<float>(rows), 1.0f);
    d.count_correct(out.memory(), labels.memory(), rows, out.dim(1), correct.memory());
  }
  EvalStats stats;
  stats.samples = test_count_;
  stats.loss = loss_sum.to_host()[0] / static_cast<double>(test_count_);
  stats.accuracy = correct.to_host()[0] / static_cast<double>(test_count_);
  return stats;
}

}  // namespace trident
