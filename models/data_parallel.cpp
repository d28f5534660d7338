// The sync strategies (gradient all-reduce, model averaging) and the persistent replica workers.
#include "trident/models/data_parallel.h"

namespace trident {

// ---- ReplicaWorkers --------------------------------------------------------------------------

ReplicaWorkers::ReplicaWorkers(size_t count) : count_(count), errors_(count) {
  if (count_ <= 1) return;
  for (size_t i = 0; i < count_; ++i) threads_.emplace_back([this, i] { loop(i); });
}

ReplicaWorkers::~ReplicaWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaWorkers::loop(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* work = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      work = work_;
    }
    std::exception_ptr error;
    try {
      (*work)(index);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[index] = error;
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ReplicaWorkers::run(const std::function<void(size_t)>& work) {
  if (count_ <= 1) {
    if (count_ == 1) work(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work_ = &work;
    pending_ = count_;
    std::fill(errors_.begin(), errors_.end(), nullptr);
    ++generation_;
  }
  wake_.notify_all();
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

// ---- strategies --------------------------------------------------------------------------------

namespace {

class GradientAllReduce final : public SyncStrategy {
 public:
  GradientAllReduce(AllReducePlan plan, bool capture, bool buckets)
      : plan_(plan), capture_(capture), buckets_(buckets) {}

  std::string describe() const override {
    switch (plan_) {
      case AllReducePlan::whole_step: return "gradient all-reduce, one captured step";
      case AllReducePlan::per_replica:
        return buckets_ ? "gradient all-reduce in buckets during backward, a captured step per "
                          "device"
                        : "gradient all-reduce, a captured step per device";
      case AllReducePlan::bucketed: return "gradient all-reduce in buckets during backward";
      case AllReducePlan::after_backward: return "gradient all-reduce after backward";
    }
    return "gradient all-reduce";
  }
  bool sums_gradients() const override { return true; }

  void step(ReplicaSteps& steps, ReplicaWorkers& workers, int64_t) override {
    const size_t n = steps.replicas();
    switch (plan_) {
      case AllReducePlan::whole_step:
        steps.run_step(0, [&] {
          steps.forward(0);
          if (buckets_) {
            steps.backward_all_in_buckets();
            steps.update(0);
          } else if (steps.alone()) {
            steps.backward_and_update(0);
          } else {
            steps.backward(0);
            steps.sum_gradients();
            steps.update(0);
          }
        }, capture_);
        return;
      case AllReducePlan::per_replica:
        workers.run([&](size_t i) {
          steps.run_step(i, [this, &steps, i] {
            steps.forward(i);
            if (buckets_) {
              steps.backward_in_buckets(i);
            } else {
              steps.backward(i);
              steps.sum_gradients_of(i);
            }
            steps.update(i);
          }, capture_);
        });
        return;
      case AllReducePlan::bucketed:
        for (size_t i = 0; i < n; ++i) steps.forward(i);
        steps.backward_all_in_buckets();
        for (size_t i = 0; i < n; ++i) steps.update(i);
        return;
      case AllReducePlan::after_backward:
        workers.run([&](size_t i) {
          steps.forward(i);
          steps.backward(i);
        });
        steps.sum_gradients();
        workers.run([&](size_t i) { steps.update(i); });
        return;
    }
  }

 private:
  AllReducePlan plan_;
  bool capture_, buckets_;
};

class ModelAveraging final : public SyncStrategy {
 public:
  ModelAveraging(int64_t every, bool capture) : every_(every), capture_(capture) {}
  std::string describe() const override {
    return "model averaging every " + std::to_string(every_) + " step" + (every_ == 1 ? "" : "s");
  }
  bool sums_gradients() const override { return false; }
  // Each replica steps alone (its own captured step), then every K steps the weights average.
  void step(ReplicaSteps& steps, ReplicaWorkers& workers, int64_t global_step) override {
    workers.run([&](size_t i) {
      steps.run_step(i, [&steps, i] {
        steps.forward(i);
        steps.backward_and_update(i);
      }, capture_);
    });
    if ((global_step + 1) % every_ == 0) steps.average_weights();
  }
  void end_epoch(ReplicaSteps& steps, int64_t global_step) override {
    if (global_step % every_ != 0) steps.average_weights();
  }

 private:
  int64_t every_;
  bool capture_;
};

}  // namespace

std::unique_ptr<SyncStrategy> make_gradient_all_reduce(AllReducePlan plan, bool capture,
                                                       bool buckets) {
  return std::make_unique<GradientAllReduce>(plan, capture, buckets);
}

std::unique_ptr<SyncStrategy> make_model_averaging(int64_t every, bool capture) {
  return std::make_unique<ModelAveraging>(every, capture);
}

}  // namespace trident
