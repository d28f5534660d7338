// Trainer: the data set resident on each device, the epoch loop, evaluation, checkpoints, and
// data parallelism (one replica per device; gradients summed across replicas before the update,
// or weights averaged every K steps).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/collective.h"
#include "trident/core/idx.h"
#include "trident/models/loss.h"
#include "trident/models/network.h"
#include "trident/models/optimizer.h"

namespace trident {

struct TrainOptions {
  std::string model = "cnn";
  int64_t batch = 200;            // global batch, split evenly across the devices
  OptimizerConfig optimizer;      // defaults: SGD, lr 0.01, momentum 0.5 (the notebook's)
  uint64_t seed = 1;
  bool capture = true;            // replay the step as a captured graph where the device can
  int64_t average_every = 0;      // 0: gradient all-reduce every step; K > 0: average weights every K steps
  int64_t eval_batch = 1000;
  // Several processes training together (an MPI job; the CLI sets these under mpirun): this
  // process's devices are replicas [process_rank * devices, ...) of process_count * devices,
  // and `collective` (when set) sums over all of them instead of make_collective(devices).
  int64_t process_count = 1, process_rank = 0;
  std::function<std::unique_ptr<Collective>(const std::vector<Device*>&)> collective;
  // Where the collective runs beside the compute (Collective::overlaps(): NCCL), the gradient
  // sum is started in buckets during backward: a bucket starts once it holds bucket_bytes of
  // finished gradients (0: TRIDENT_BUCKET_MB if set, else 16 MiB), the rest at the first layer.
  // overlap = false (or TRIDENT_OVERLAP=0) sums once after backward, for comparison.
  bool overlap = true;
  int64_t bucket_bytes = 0;
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

class Trainer {
 public:
  Trainer(std::vector<Device*> devices, TrainOptions options, const MnistSplits& data);
  ~Trainer();

  // Trains one epoch (the next one); `on_progress` is called at most every `interval` seconds.
  EpochStats train_epoch(const std::function<void(const Progress&)>& on_progress = {},
                         double interval = 0.5);
  EvalStats evaluate();

  int64_t epochs_done() const { return epochs_done_; }
  int64_t global_step() const { return global_step_; }
  Network& network();
  const TrainOptions& options() const { return options_; }
  std::string device_names() const;  // "cuda:0,cuda:1"
  std::string collective_name() const { return collective_->name(); }
  // True when the gradient sum overlaps backward (bucketed); see TrainOptions::overlap.
  bool overlaps_backward() const { return overlap_; }

  // Checkpoint: weights by name, optimizer state, seed, step and epoch counters (safetensors).
  void save_checkpoint(const std::string& path) const;
  // Restores weights, optimizer state and counters; the model and optimizer kind must match.
  void load_checkpoint(const std::string& path);

 private:
  struct Replica;
  void upload_epoch_tables(int64_t epoch);
  StepContext train_context(const Replica& r) const;
  void forward_replica(Replica& r);
  void step_replica(Replica& r);
  void backward_in_buckets();
  void run_on_replicas(const std::function<void(Replica&)>& work);
  void average_replicas();

  TrainOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<Collective> collective_;
  int64_t per_replica_batch_ = 0;
  bool overlap_ = false;          // gradient sums in buckets during backward
  int64_t bucket_bytes_ = 0;
  int64_t replica_count_ = 1;  // replicas in all processes
  int64_t train_count_ = 0, test_count_ = 0;
  int64_t epochs_done_ = 0, global_step_ = 0;
};

// Reads a checkpoint's metadata (model name, optimizer ...) without building anything.
std::string checkpoint_model_name(const std::string& path);

}  // namespace trident
