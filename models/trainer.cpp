// The training loop: resident data, per-epoch index tables, one (captured) step per batch,
// evaluation. The gradients' meeting across replicas: models/trainer_gradients.cpp; the
// batch's division among devices: models/trainer_batch_split.cpp.
#include "trident/models/trainer.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/log.h"
#include "trident/core/philox.h"
#include "trident/models/replica.h"

namespace trident {

namespace {

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

// The Philox stream of the augmentation draws (apart from dropout's layer streams and
// initialisation's 0x80000000 + p).
constexpr uint32_t kAugmentStream = 0x40000000u;

// A sample shape as the [C, H, W] that gather_samples reads: [H, W] -> [1, H, W], [D] -> [1, 1, D].
Shape image_shape(const Shape& sample) {
  if (sample.size() == 3) return sample;
  if (sample.size() == 2) return {1, sample[0], sample[1]};
  if (sample.size() == 1) return {1, 1, sample[0]};
  throw ShapeError("samples of shape " + shape_string(sample) +
                   " are not supported: use [C, H, W], [H, W] or [features]");
}

Shape with_batch(int64_t batch, const Shape& sample) {
  Shape s{batch};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// One split's samples on the device, in their stored dtype.
Tensor upload_samples(Device& d, const Dataset& split) {
  const Shape shape = with_batch(split.size(), image_shape(split.sample_shape()));
  Tensor t = Tensor::empty(d, shape, split.dtype());
  t.copy_from_host(split.data(), t.bytes());
  return t;
}

}  // namespace

Trainer::Trainer(std::vector<Device*> devices, ModelFactory model, const DatasetSplits& data,
                 TrainOptions options)
    : options_(std::move(options)) {
  if (devices.empty()) throw UsageError("no devices to train on");
  if (!model) throw UsageError("no model: pass a function that builds the Network");
  validate(options_.optimizer);
  validate(options_.schedule);
  if (options_.epochs < 1) throw UsageError("epochs must be at least 1");
  if (!(options_.label_smoothing >= 0.0f && options_.label_smoothing < 1.0f))
    throw UsageError("label smoothing must be in [0, 1)");
  if (options_.augment.crop_padding < 0) throw UsageError("the crop padding must be >= 0");
  if (options_.eval_batch < 1) throw UsageError("the evaluation batch must be at least 1");
  precision_ = resolve_precision(options_.precision);
  if (!(options_.initial_loss_scale > 0.0f) || !std::isfinite(options_.initial_loss_scale))
    throw UsageError("the initial loss scale must be positive and finite");
  if (options_.process_count < 1 || options_.process_rank < 0 ||
      options_.process_rank >= options_.process_count)
    throw UsageError("process " + std::to_string(options_.process_rank) + " of " +
                     std::to_string(options_.process_count) + " does not exist");
  const int64_t n = static_cast<int64_t>(devices.size()) * options_.process_count;
  replica_count_ = n;
  const std::vector<int64_t> split = batch_split(options_, devices.size());
  const Dataset& train = data.train;
  const Dataset& test = data.test;
  train_count_ = train.size();
  test_count_ = test.size();
  data_source_ = test.source();
  if (train_count_ < options_.batch)
    throw UsageError("the training set (" + train.source() + ") has " +
                     std::to_string(train_count_) + " samples, fewer than one batch of " +
                     std::to_string(options_.batch));
  if (test_count_ == 0)  // else the shape check below would name the empty split's shape []
    throw UsageError("the test split has no samples" +
                     (test.source().empty() ? std::string() : " (" + test.source() + ")") +
                     ": Trainer::evaluate runs on it; give it test samples (a few will do)");
  if (test.sample_shape() != train.sample_shape())
    throw ShapeError("the test samples (" + test.source() + ") have shape " +
                     shape_string(test.sample_shape()) + ", the training samples (" +
                     train.source() + ") " + shape_string(train.sample_shape()));
  const Shape sample = train.sample_shape();
  const Shape image = image_shape(sample);
  if (options_.augment.enabled() && sample.size() != 3 && sample.size() != 2)
    throw UsageError("augmentation (crop, flip) needs image samples, not " +
                     shape_string(sample));
  const int64_t channels = image[0];
  const Normalization& norm = train.normalization();
  for (const std::vector<float>* v : {&norm.mean, &norm.std})
    if (!v->empty() && v->size() != 1 && int64_t(v->size()) != channels)
      throw UsageError("the normalisation has " + std::to_string(v->size()) +
                       " values for samples of " + std::to_string(channels) + " channels");
  std::vector<float> mean(size_t(channels), 0.0f), inv_std(size_t(channels), 1.0f);
  for (int64_t c = 0; c < channels; ++c) {
    if (!norm.mean.empty()) mean[size_t(c)] = norm.mean[norm.mean.size() == 1 ? 0 : size_t(c)];
    if (!norm.std.empty())
      inv_std[size_t(c)] = 1.0f / norm.std[norm.std.size() == 1 ? 0 : size_t(c)];
  }

  const int64_t steps = train_count_ / options_.batch;
  for (size_t rank = 0; rank < devices.size(); ++rank) {
    Device& d = *devices[rank];
    // One copy of the data set per memory space (the CPU devices share the host's).
    std::shared_ptr<ResidentData> resident;
    for (auto& existing : data_)
      if (existing->memory_space == d.memory_space()) resident = existing;
    if (!resident) {
      resident = std::make_shared<ResidentData>();
      resident->memory_space = d.memory_space();
      resident->train_samples = upload_samples(d, train);
      resident->train_labels = Tensor::from_host(d, {train_count_}, train.labels());
      resident->test_samples = upload_samples(d, test);
      resident->test_labels = Tensor::from_host(d, {test_count_}, test.labels());
      resident->mean = Tensor::from_host(d, {channels}, mean);
      resident->inv_std = Tensor::from_host(d, {channels}, inv_std);
      std::vector<int32_t> order(static_cast<size_t>(test_count_));
      for (int64_t i = 0; i < test_count_; ++i) order[size_t(i)] = int32_t(i);
      resident->test_order = Tensor::from_host(d, {std::max<int64_t>(test_count_, 1)},
                                               test_count_ ? order : std::vector<int32_t>{0});
      resident->scale = norm.divide_by_255 ? 1.0f / 255.0f : 1.0f;
      data_.push_back(resident);
    }
    auto r = std::make_unique<Replica>();
    r->device = &d;
    r->rank = static_cast<size_t>(options_.process_rank) * devices.size() + rank;
    r->net = model();
    // The same seed: every replica starts identical.
    r->net.set_precision(precision_);
    r->net.build(d, sample, options_.seed);
    if (rank == 0) model_name_ = r->net.model_name();
    r->optimizer = std::make_unique<Optimizer>(options_.optimizer);
    r->optimizer->attach(r->net);
    if (uses_loss_scaling(precision_)) r->optimizer->enable_loss_scaling(options_.initial_loss_scale);
    r->data = resident;
    r->batch = split[rank];
    if (options_.process_count == 1) {
      for (size_t k = 0; k < rank; ++k) r->offset += split[k];
    } else {  // even shares across processes
      r->offset = static_cast<int64_t>(r->rank) * (options_.batch / n);
    }
    r->share = static_cast<float>(double(r->batch) / double(options_.batch));
    r->index_table = Tensor::empty(d, {std::max<int64_t>(steps * r->batch, 1)}, DType::i32);
    r->step_state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
    r->eval_state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
    r->loss_sum = Tensor::zeros(d, {1});
    r->labels = Tensor::empty(d, {std::max<int64_t>(r->batch, 1)}, DType::i32);
    replicas_.push_back(std::move(r));
  }
  Network& first = replicas_.front()->net;
  const std::string loss = options_.loss == "auto"
                               ? (first.ends_with_log_softmax() ? "nll" : "cross_entropy")
                               : options_.loss;
  loss_.kind = parse_loss(loss);
  loss_.label_smoothing = options_.label_smoothing;
  if (first.output_sample_shape().size() != 1)
    throw ShapeError("model '" + model_name_ + "' gives outputs of shape " +
                     shape_string(first.output_sample_shape()) +
                     " per sample; a classifier's output is [classes] (add a Flatten and a Linear)");
  const int64_t classes = first.output_sample_shape()[0];
  if (std::max(train.classes(), test.classes()) > classes)
    throw ShapeError("model '" + model_name_ + "' has " + std::to_string(classes) +
                     " outputs, the data set (" + train.source() + ") has " +
                     std::to_string(std::max(train.classes(), test.classes())) + " classes");
  if (loss_.kind == LossKind::nll && !first.ends_with_log_softmax())
    throw UsageError("the nll loss needs a model ending in LogSoftmax; use cross_entropy");
  upload_schedule();
  collective_ = options_.collective ? options_.collective(devices) : make_collective(devices);
  update_beside_ = options_.overlap && env_flag("TRIDENT_OVERLAP", true);
  for (auto& r : replicas_) r->beside = update_beside_;
  overlap_ = update_beside_ && collective_->overlaps() && n > 1 && options_.average_every <= 0;
  bucket_bytes_ = options_.bucket_bytes > 0
                      ? options_.bucket_bytes
                      : env_int("TRIDENT_BUCKET_MB", 16, 1, 1 << 20) * (int64_t(1) << 20);
  if (options_.average_every < -1) throw UsageError("average_every must be >= -1");
  if (options_.split_by_speed && !options_.split.empty())
    throw UsageError("give either a batch split or split_by_speed, not both");
  if (options_.average_every == -1 && !options_.split_by_speed)
    options_.average_every = 1;  // nothing measured: average every step
  workers_ = std::make_unique<ReplicaWorkers>(replicas_.size());
  choose_strategy();
  if (options_.split_by_speed) balance_by_speed();
}

void Trainer::choose_strategy() {
  const size_t n = replicas_.size();
  if (options_.average_every > 0) {
    strategy_ = make_model_averaging(options_.average_every, options_.capture);
    return;
  }
  AllReducePlan plan = AllReducePlan::after_backward;
  bool buckets = false;
  if (n == 1 && (replica_count_ == 1 || collective_->capturable())) {
    plan = AllReducePlan::whole_step;
    buckets = overlap_;
  } else if (collective_->per_device() && collective_->capturable()) {
    plan = AllReducePlan::per_replica;
    buckets = overlap_;
  } else if (overlap_) {
    plan = AllReducePlan::bucketed;
  }
  strategy_ = make_gradient_all_reduce(plan, options_.capture, buckets);
}

std::string Trainer::sync_description() const { return strategy_->describe(); }

std::vector<int64_t> Trainer::batch_sizes() const {
  std::vector<int64_t> sizes;
  for (const auto& r : replicas_) sizes.push_back(r->batch);
  return sizes;
}

// Teardown order (issue 14, finding 1): a captured step holds the collective (the CUDA graph
// that recorded NCCL's all-reduce references the communicator, and finalizing the communicator
// waits until every such graph is gone), so the captured steps go first, then each device
// finishes its queued work, then the collective. Destroyed while a failure unwinds the stack,
// the collective is aborted first: the other ranks may never match the work already queued, and
// neither the device wait nor the collective's finalize may wait for them.
Trainer::~Trainer() {
  if (collective_ && std::uncaught_exceptions() > 0) collective_->abort();
  for (auto& r : replicas_) r->captured.reset();
  for (auto& r : replicas_) {
    try {
      r->device->synchronize();
    } catch (const std::exception& e) {  // a destructor reports, never throws
      log_warning(r->device->info().id() + ": " + e.what());
    }
  }
  collective_.reset();
}

int64_t Trainer::steps_per_epoch() const { return train_count_ / options_.batch; }

Network& Trainer::network() {
  for (auto& r : replicas_) r->compute_current = false;  // the caller may write the weights
  return replicas_.front()->net;
}

std::string Trainer::device_names() const {
  std::string names;
  for (const auto& r : replicas_) names += (names.empty() ? "" : ",") + r->device->info().id();
  return names;
}

void Trainer::upload_schedule() {
  const double momentum =
      options_.optimizer.kind == "sgd" ? options_.optimizer.momentum : options_.optimizer.beta1;
  const std::vector<float> table =
      schedule_table(options_.schedule, options_.optimizer.lr, momentum,
                     options_.epochs * steps_per_epoch(), steps_per_epoch());
  for (auto& r : replicas_) r->optimizer->set_schedule(table);
}

void Trainer::upload_epoch_tables(int64_t epoch) {
  const int64_t steps = steps_per_epoch();
  const std::vector<int32_t> order = epoch_permutation(train_count_, options_.seed, epoch);
  for (auto& r : replicas_) {
    // Replica r takes samples [offset, offset + batch) of every global batch.
    std::vector<int32_t> table(static_cast<size_t>(steps * r->batch));
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t i = 0; i < r->batch; ++i)
        table[static_cast<size_t>(s * r->batch + i)] =
            order[static_cast<size_t>(s * options_.batch + r->offset + i)];
    if (!table.empty())
      r->index_table.view(0, {int64_t(table.size())})
          .copy_from_host(table.data(), table.size() * sizeof(int32_t));
    const uint32_t state[2] = {0u, static_cast<uint32_t>(global_step_)};
    r->step_state.copy_from_host(state, sizeof(state));
    r->device->fill(r->loss_sum, 0.0f);
  }
}

// Gather the batch, forward, loss and its gradient: everything before the network's backward.
void Trainer::forward(size_t i) {
  Replica& r = *replicas_[i];
  StepContext ctx = r.context(true, r.offset, options_.seed);
  ctx.compute_parameters_current = r.compute_current;
  const Tensor& input = r.net.input_buffer(r.batch);
  SampleTransform t;
  t.scale = r.data->scale;
  t.mean = r.data->mean;
  t.inv_std = r.data->inv_std;
  t.crop_padding = options_.augment.crop_padding;
  t.horizontal_flip = options_.augment.horizontal_flip;
  t.seed = options_.seed;
  t.stream = kAugmentStream;
  t.sample_offset = r.offset;
  const Shape image = Shape(r.data->train_samples.shape().begin() + 1,
                            r.data->train_samples.shape().end());
  const Tensor table = r.index_table.view(0, {steps_per_epoch() * r.batch});
  const Tensor labels = r.labels.view(0, {r.batch});
  r.device->gather_samples(r.data->train_samples, table, r.step_state, t,
                           input.reshape(with_batch(r.batch, image)));
  r.device->gather_rows(r.data->train_labels, table, r.step_state, labels);
  // Summed gradients: each replica's loss gradient weighted by its share of the global batch,
  // so that the sum over replicas is the global batch's mean.
  const float scale = strategy_->sums_gradients() ? r.share : 1.0f;
  r.net.forward_loss(ctx, input, labels, loss_, r.loss_sum, true, scale,
                     r.optimizer->loss_scale());
  r.compute_current = true;  // converted now if it was not; the updates keep it so
}

void Trainer::backward(size_t i) {
  Replica& r = *replicas_[i];
  r.net.backward(r.context(true, r.offset, options_.seed));
}

void Trainer::update(size_t i) {
  Replica& r = *replicas_[i];
  r.optimizer->step(r.context(true, 0, options_.seed), 1.0f);
}

void Trainer::run_step(size_t i, const std::function<void()>& step, bool capture) {
  Replica& r = *replicas_[i];
  if (!r.compute_current) {
    r.net.refresh_compute_parameters(r.context(true, 0, options_.seed));
    r.compute_current = true;
  }
  // The first step runs eagerly (it allocates every buffer); the second is captured once.
  if (r.captured) {
    r.captured->replay();
  } else if (capture && !r.capture_tried && r.steps_run > 0) {
    r.capture_tried = true;
    r.captured = r.device->capture(step);
    if (r.captured) r.captured->replay(); else step();
  } else {
    step();
  }
  ++r.steps_run;
}

EpochStats Trainer::train_epoch(const std::function<void(const Progress&)>& on_progress,
                                double interval) {
  const int64_t epoch = epochs_done_ + 1;
  const int64_t steps = steps_per_epoch();
  upload_epoch_tables(epoch);
  for (auto& r : replicas_) r->device->synchronize();
  const double start = now_seconds();
  double last_report = start;
  for (int64_t s = 0; s < steps; ++s) {
    collective_->begin_step(global_step_ + 1);  // for the watchdog and its messages
    strategy_->step(*this, *workers_, global_step_);
    ++global_step_;
    const double t = now_seconds();
    if (on_progress && t - last_report >= interval) {
      last_report = t;
      float loss_sum = 0.0f;
      replicas_[0]->loss_sum.to_host(&loss_sum, sizeof(float));
      on_progress({s + 1, steps, loss_sum / static_cast<double>(s + 1), t - start});
    }
  }
  strategy_->end_epoch(*this, global_step_);
  double loss_sum = 0.0;  // the replicas' batch-loss sums weighted by their shares; reading waits
  if (options_.process_count > 1) {  // every process reports the mean over all processes
    std::vector<DeviceMemory> sums;
    for (auto& r : replicas_) sums.push_back(r->loss_sum.memory());
    collective_->all_reduce_sum(sums, 1);
    float total = 0.0f;
    replicas_[0]->loss_sum.to_host(&total, sizeof(float));
    loss_sum = total / static_cast<double>(replica_count_);
  } else {
    for (auto& r : replicas_) {
      float replica_sum = 0.0f;
      r->loss_sum.to_host(&replica_sum, sizeof(float));
      loss_sum += replica_sum * static_cast<double>(r->share);
    }
  }
  collective_->throw_if_failed();  // losses read after an abort are garbage: never report them
  for (auto& r : replicas_) r->net.set_batches_tracked(global_step_);
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
  const ResidentData& data = *r.data;
  const Shape image(data.test_samples.shape().begin() + 1, data.test_samples.shape().end());
  SampleTransform t;  // normalisation only: no augmentation at evaluation
  t.scale = data.scale;
  t.mean = data.mean;
  t.inv_std = data.inv_std;
  StepContext ctx = r.context(false, 0, options_.seed);
  ctx.step_state = r.eval_state;
  for (int64_t begin = 0; begin < test_count_; begin += options_.eval_batch) {
    const int64_t rows = std::min(options_.eval_batch, test_count_ - begin);
    const Tensor& input = r.net.input_buffer(rows);
    d.gather_samples(data.test_samples, data.test_order.view(begin, {rows}), r.eval_state, t,
                     input.reshape(with_batch(rows, image)));
    const Tensor labels = data.test_labels.view(begin, {rows});
    const Tensor& out = r.net.forward(ctx, input);
    r.net.evaluate_loss(ctx, out, labels, loss_, batch_loss, false);
    d.axpby(batch_loss, loss_sum, static_cast<float>(rows), 1.0f);
    d.count_correct(out, labels, correct);
  }
  EvalStats stats;
  stats.samples = test_count_;
  if (test_count_ > 0) {
    stats.loss = loss_sum.to_host()[0] / static_cast<double>(test_count_);
    stats.accuracy = correct.to_host()[0] / static_cast<double>(test_count_);
  }
  collective_->throw_if_failed();  // weights an aborted sum left behind evaluate to garbage
  return stats;
}

float Trainer::loss_scale() const {
  const Tensor& scale = replicas_.front()->optimizer->loss_scale();
  return scale.defined() ? scale.to_host()[0] : 0.0f;
}

}  // namespace trident
