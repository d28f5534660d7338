// Trainer: trains any Network on any Dataset with the same machinery for every model: the data
// set resident on each device (one copy per memory space), the step as one captured graph
// where the device can, data parallelism over several devices (gradient all-reduce, or weights
// averaged every K steps), schedules, progress, evaluation and checkpoints.
//
//   DatasetSplits data = load_dataset("/usr/share/datasets/fashion-mnist");
//   TrainOptions options;
//   options.optimizer.kind = "adamw";
//   Trainer trainer(DeviceRegistry::global().selected_devices(), my_model, data, options);
//   for (int e = 0; e < 5; ++e) { trainer.train_epoch(); trainer.evaluate(); }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trident/core/collective.h"
#include "trident/core/dataset.h"
#include "trident/models/network.h"
#include "trident/models/optimizer.h"
#include "trident/models/data_parallel.h"
#include "trident/models/schedule.h"

namespace trident {

// On-device augmentation of training samples (images C x H x W): a random crop of the sample
// zero-padded by crop_padding on each side, and a random left-right flip, drawn with Philox so
// that runs are reproducible and the same on every backend.
struct AugmentConfig {
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  bool enabled() const { return crop_padding > 0 || horizontal_flip; }
};

struct TrainOptions {
  int64_t batch = 200;            // global batch, split evenly across the devices
  int64_t epochs = 1;             // the run's length: a schedule spans epochs * steps per epoch
  OptimizerConfig optimizer;      // defaults: SGD, lr 0.01, momentum 0.5 (the notebook's)
  ScheduleConfig schedule;        // default: constant learning rate
  std::string loss = "auto";      // auto (nll after a LogSoftmax, else cross_entropy),
                                  // cross_entropy, nll or mse
  float label_smoothing = 0.0f;
  AugmentConfig augment;
  uint64_t seed = 1;              // initial weights, shuffling, dropout, augmentation
  // fp32, tf32, bf16 or fp16 (models/precision.h); unset: TRIDENT_PRECISION, else fp32.
  std::optional<Precision> precision;
  float initial_loss_scale = 65536.0f;  // fp16 only (GradScaler's default)
  bool capture = true;            // replay the step as a captured graph where the device can
  // 0: gradient all-reduce every step; K > 0: average weights every K steps; -1: average, with
  // K chosen so that averaging costs at most a tenth of the steps (measured; see split_by_speed).
  int64_t average_every = 0;
  int64_t eval_batch = 1000;
  // Several processes training together (an MPI job; the CLI sets these under mpirun): this
  // process's devices are replicas [process_rank * devices, ...) of process_count * devices,
  // and `collective` (when set) sums over all of them instead of make_collective(devices).
  int64_t process_count = 1, process_rank = 0;
  std::function<std::unique_ptr<Collective>(const std::vector<Device*>&)> collective;
  // Work on finished gradients runs beside the rest of backward, in buckets: a bucket closes
  // once it holds bucket_bytes of gradients (0: TRIDENT_BUCKET_MB if set, else 16 MiB), the
  // rest at the first layer. With several devices, where the collective runs beside the compute
  // (Collective::overlaps(): NCCL), each bucket's gradient sum is started then; with one device
  // (or model averaging), where the device has a side queue (CUDA) and the optimizer updates by
  // range (no clipping, no fp16 loss scaling), each bucket's optimizer update is queued beside.
  // overlap = false (or TRIDENT_OVERLAP=0) sums and updates after backward, for comparison.
  bool overlap = true;
  int64_t bucket_bytes = 0;
  // How the global batch is split over this process's devices: empty, evenly; else one positive
  // share per device (e.g. {30, 1}: the first device takes 30/31 of every batch), for sets of
  // devices of different speeds (one process only). measure_split() finds shares by speed.
  std::vector<double> split;
  // Measure each local device's step and split the batch in proportion to their speeds (one
  // process): a device too slow to take 1% of the batch is left out, with a message, so that
  // adding a device never makes the set slower than its fastest device alone.
  bool split_by_speed = false;
};

struct EpochStats {
  int64_t epoch = 0;              // 1-based
  int64_t steps = 0;
  double train_loss = 0.0;        // mean of the steps' batch losses
  double seconds = 0.0;           // training only, evaluation excluded
  double samples_per_s = 0.0;
};

struct EvalStats {
  double loss = 0.0;
  double accuracy = 0.0;          // fraction in [0, 1]
  int64_t samples = 0;
};

// Progress of an epoch, reported about every `interval` seconds (the loss read costs a sync).
struct Progress {
  int64_t step = 0, steps = 0;
  double loss = 0.0, seconds = 0.0;
};

// A fresh, unbuilt network: called once per device (every replica gets its own).
using ModelFactory = std::function<Network()>;

class Trainer : private ReplicaSteps {
 public:
  Trainer(std::vector<Device*> devices, ModelFactory model, const DatasetSplits& data,
          TrainOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains one epoch (the next one); `on_progress` is called at most every `interval` seconds.
  EpochStats train_epoch(const std::function<void(const Progress&)>& on_progress = {},
                         double interval = 0.5);
  // Loss and accuracy on the test split, in evaluation mode (dropout off, batch norm on its
  // running statistics), on the first device.
  EvalStats evaluate();

  int64_t epochs_done() const { return epochs_done_; }
  int64_t global_step() const { return global_step_; }
  int64_t steps_per_epoch() const;
  // The first replica's network (the others are identical in their parameters; each keeps its
  // own batch-norm statistics, as PyTorch's DDP does with broadcast_buffers=False).
  Network& network();
  const TrainOptions& options() const { return options_; }
  Precision precision() const { return precision_; }
  // fp16: the current loss scale (read from the first device; a sync). 0 when not scaling.
  float loss_scale() const;
  LossSpec loss() const { return loss_; }
  std::string device_names() const;  // "cuda:0,cuda:1"
  std::string collective_name() const { return collective_->name(); }
  // True when the gradient sum overlaps backward (bucketed); see TrainOptions::overlap.
  bool overlaps_backward() const { return overlap_; }
  // How the replicas combine their steps ("gradient all-reduce, one captured step", ...).
  std::string sync_description() const;
  // The samples of each global batch each local device takes.
  std::vector<int64_t> batch_sizes() const;
  // What split_by_speed measured and decided ("" when it did not run).
  const std::string& balance_report() const { return balance_report_; }

  // Training checkpoint (models/checkpoint.cpp): the weights and buffers under their
  // state-dict names, the optimizer state under "optimizer.", the settings and counters as
  // metadata; written atomically. load_checkpoint restores all of it; the model and optimizer
  // must match.
  void save_checkpoint(const std::string& path) const;
  void load_checkpoint(const std::string& path);

  struct Replica;  // what one device holds (models/replica.h)
  struct ResidentData;

 private:
  static std::vector<int64_t> batch_split(const TrainOptions& o, size_t local);
  void balance_by_speed();
  double probe_step_seconds(size_t i);
  void resize_replica_batch(Replica& r, int64_t batch, int64_t offset);
  void choose_strategy();
  void upload_epoch_tables(int64_t epoch);
  void upload_schedule();
  // ReplicaSteps: what the sync strategy asks for (models/data_parallel.h).
  size_t replicas() const override { return replicas_.size(); }
  void forward(size_t i) override;
  void backward(size_t i) override;
  void backward_all_in_buckets() override;
  void backward_in_buckets(size_t i) override;
  void update(size_t i) override;
  void backward_and_update(size_t i) override;
  bool alone() const override { return replica_count_ == 1; }
  void sum_gradients() override;
  void sum_gradients_of(size_t i) override;
  void average_weights() override;
  void run_step(size_t i, const std::function<void()>& step, bool capture) override;
  // Backward of the replicas `which`, start(begin, count) called for each bucket of finished
  // gradients (see trainer_gradients.cpp).
  void backward_in_buckets_of(const std::vector<size_t>& which,
                              const std::function<void(int64_t, int64_t)>& start,
                              bool after_input = false);
  DeviceMemory gradients_from(size_t replica, int64_t begin) const;  // gradient buffer at begin

  TrainOptions options_;
  Precision precision_ = Precision::fp32;
  LossSpec loss_;
  std::string model_name_;
  std::string data_source_;  // for messages: where the test split came from
  std::string balance_report_;
  std::vector<std::shared_ptr<ResidentData>> data_;  // one per memory space
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<Collective> collective_;
  std::unique_ptr<SyncStrategy> strategy_;
  std::unique_ptr<ReplicaWorkers> workers_;
  bool overlap_ = false;          // gradient sums in buckets during backward
  bool update_beside_ = false;    // TrainOptions::overlap for optimizer updates (one replica)
  int64_t bucket_bytes_ = 0;
  int64_t replica_count_ = 1;  // replicas in all processes
  int64_t train_count_ = 0, test_count_ = 0;
  int64_t epochs_done_ = 0, global_step_ = 0;
};

// Reads a checkpoint's metadata (the model name) without building anything.
std::string checkpoint_model_name(const std::string& path);

}  // namespace trident
