// Data parallelism as a strategy the Trainer asks what to do around each step: gradient
// all-reduce (whole step captured on one device, captured per device with a per-device
// collective, bucketed during backward, or one sum after it) or model averaging every K steps;
// and the persistent worker threads that drive several devices at once.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trident {

// One persistent thread per local replica, so that a step's per-device work runs on every
// device at once and no thread is made per step. With one replica, work runs on the caller.
class ReplicaWorkers {
 public:
  explicit ReplicaWorkers(size_t count);
  ~ReplicaWorkers();
  ReplicaWorkers(const ReplicaWorkers&) = delete;
  ReplicaWorkers& operator=(const ReplicaWorkers&) = delete;
  size_t size() const { return count_; }
  // Runs work(i) on worker i for every i, waits for all, rethrows the first failure.
  void run(const std::function<void(size_t)>& work);

 private:
  void loop(size_t index);
  size_t count_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* work_ = nullptr;
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
};

// The per-replica pieces of a step, provided by the Trainer. Replica i is a local device.
class ReplicaSteps {
 public:
  virtual ~ReplicaSteps() = default;
  virtual size_t replicas() const = 0;
  // Gathers replica i's batch, runs forward and the loss (its gradient weighted by the
  // replica's share of the global batch when gradients are summed).
  virtual void forward(size_t i) = 0;
  virtual void backward(size_t i) = 0;
  // Backward of every local replica from one thread, gradient sums started in buckets.
  virtual void backward_all_in_buckets() = 0;
  // The optimizer step of replica i (it advances the replica's step counters).
  virtual void update(size_t i) = 0;
  // backward(i) then update(i), for steps with no gradient sum between them (one replica in
  // the whole run, or model averaging): where it can, each bucket of finished gradients is
  // updated beside the backward of the layers below it (Device::queue_beside).
  virtual void backward_and_update(size_t i) = 0;
  // True when one replica trains in the whole run (this process, one device): no sums.
  virtual bool alone() const = 0;
  // The sum of every replica's gradient buffer (all processes), from one thread.
  virtual void sum_gradients() = 0;
  // Replica i's part of the gradient sum, from replica i's thread (a per-device collective).
  virtual void sum_gradients_of(size_t i) = 0;
  // Backward of replica i from its own thread, its part of the gradient sum started in buckets
  // (a per-device collective that overlaps).
  virtual void backward_in_buckets(size_t i) = 0;
  // Every replica's weights and optimizer state replaced by their average over all replicas,
  // weighted by each replica's share of the global batch.
  virtual void average_weights() = 0;
  // Runs `step` for replica i: eagerly at first, then recorded once by the device and replayed
  // (when `capture` and the device can).
  virtual void run_step(size_t i, const std::function<void()>& step, bool capture) = 0;
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;
  // For messages and the bench: "all-reduce (one captured step)", "average every 8 steps".
  virtual std::string describe() const = 0;
  // Whether each replica's loss gradient is weighted by its share of the global batch (gradient
  // sums: the sum is then the global mean) or not (model averaging: each replica steps alone).
  virtual bool sums_gradients() const = 0;
  // One global step of every local replica; global_step counts the steps done before it.
  virtual void step(ReplicaSteps& steps, ReplicaWorkers& workers, int64_t global_step) = 0;
  // After an epoch's last step (model averaging averages what is left).
  virtual void end_epoch(ReplicaSteps& steps, int64_t global_step) {
    (void)steps;
    (void)global_step;
  }
};

// How the gradient all-reduce runs, decided once from the devices and the collective.
enum class AllReducePlan : uint8_t {
  whole_step,   // one local replica: forward, backward, the sum (if any) and the update as one
                // step, captured (the collective inside it where there are other processes)
  per_replica,  // several local replicas, each its own thread and captured step with its part
                // of a per-device collective inside (NCCL), in buckets where it overlaps
  bucketed,     // one thread queues every replica's backward, sums started in buckets (NCCL)
  after_backward,  // every replica's forward and backward on its thread, one sum, updates
};
// buckets (whole_step, per_replica): backward starts its sums in buckets (a collective that
// overlaps).
std::unique_ptr<SyncStrategy> make_gradient_all_reduce(AllReducePlan plan, bool capture,
                                                       bool buckets = false);
std::unique_ptr<SyncStrategy> make_model_averaging(int64_t every, bool capture);

}  // namespace trident
