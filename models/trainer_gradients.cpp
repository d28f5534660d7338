// How a step's gradients meet across replicas (models/trainer.h): the backward layer by layer
// from the top with each bucket's all-reduce started while the layers below are still being
// differentiated, the update of finished buckets beside the backward on one device, and the
// periodic weight averaging of the local-SGD strategy.
#include <functional>
#include <vector>

#include "trident/models/replica.h"
#include "trident/models/trainer.h"

namespace trident {

void Trainer::backward_and_update(size_t i) {
  Replica& r = *replicas_[i];
  const bool beside = update_beside_ && r.device->has_side_queue() &&
                      r.optimizer->updates_by_range() &&
                      r.net.parameter_count() * int64_t(sizeof(float)) > bucket_bytes_;
  if (!beside) {  // one bucket at most: nothing would run beside
    backward(i);
    update(i);
    return;
  }
  const StepContext ctx = r.context(true, 0, options_.seed);
  // Each bucket once the input gradient of its lowest layer is queued: that reads the layer's
  // weights, which the update overwrites. The side queue runs it after the weight gradients
  // layers finished there (StepContext::beside).
  backward_in_buckets_of({i}, [&](int64_t begin, int64_t count) {
    r.device->queue_beside([&] { r.optimizer->update_range(ctx, begin, count); });
  }, true);
  r.device->join_beside();
  r.optimizer->finish_step(ctx);
}

void Trainer::sum_gradients() {
  if (replica_count_ == 1) return;
  std::vector<DeviceMemory> grads;
  for (auto& r : replicas_) grads.push_back(r->net.gradients().memory());
  collective_->all_reduce_sum(grads, replicas_[0]->net.parameter_count());
}

void Trainer::sum_gradients_of(size_t i) {
  collective_->all_reduce_sum_device(i, replicas_[i]->net.gradients().memory(),
                                     replicas_[i]->net.parameter_count());
}

// Backward through the networks of the replicas `which` layer by layer from the top (one host
// thread queues all of it: GPU calls return at once), calling start(begin, count) for each bucket
// of finished gradients while the layers below are still being differentiated. Parameters lie in
// layer order, so the finished gradients are always the buffer's tail [begin of the last layer
// done, count): a bucket is its part not yet started.
void Trainer::backward_in_buckets_of(const std::vector<size_t>& which,
                                     const std::function<void(int64_t, int64_t)>& start,
                                     bool after_input) {
  const Network& first = replicas_[which.front()]->net;
  std::vector<StepContext> contexts;
  for (size_t k : which)
    contexts.push_back(replicas_[k]->context(true, replicas_[k]->offset, options_.seed));
  int64_t unsummed_end = first.parameter_count();  // gradients at and past it are started
  for (size_t i = first.layer_count(); i-- > 0;) {
    for (size_t j = 0; j < which.size(); ++j)
      replicas_[which[j]]->net.backward_layer_parameters(contexts[j], i);
    // dx of layer i: queued after the bucket's start (so that the sum runs beside it), unless
    // the bucket's work writes what dx reads (after_input).
    if (after_input)
      for (size_t j = 0; j < which.size(); ++j)
        replicas_[which[j]]->net.backward_layer_input(contexts[j], i);
    const int64_t begin = first.layer_parameters(i).begin;
    const int64_t count = unsummed_end - begin;
    if (count > 0 && (count * int64_t(sizeof(float)) >= bucket_bytes_ || i == 0)) {
      start(begin, count);
      unsummed_end = begin;
    }
    if (!after_input)
      for (size_t j = 0; j < which.size(); ++j)
        replicas_[which[j]]->net.backward_layer_input(contexts[j], i);
  }
}

DeviceMemory Trainer::gradients_from(size_t replica, int64_t begin) const {
  return replicas_[replica]->net.gradients().memory().at(static_cast<size_t>(begin) *
                                                         sizeof(float));
}

// Every replica from this thread; finish_all_reduces joins the sums before the update.
void Trainer::backward_all_in_buckets() {
  std::vector<size_t> all(replicas_.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = k;
  std::vector<DeviceMemory> bucket(replicas_.size());
  backward_in_buckets_of(all, [&](int64_t begin, int64_t count) {
    for (size_t k = 0; k < replicas_.size(); ++k) {
      replicas_[k]->device->join_beside();  // weight gradients finished beside (StepContext)
      bucket[k] = gradients_from(k, begin);
    }
    collective_->start_all_reduce_sum(bucket, count);
  });
  collective_->finish_all_reduces();
}

// Replica i from its own thread (every replica's thread starts the same buckets in order).
void Trainer::backward_in_buckets(size_t i) {
  backward_in_buckets_of({i}, [&](int64_t begin, int64_t count) {
    replicas_[i]->device->join_beside();  // weight gradients finished beside (StepContext)
    collective_->start_all_reduce_sum_device(i, gradients_from(i, begin), count);
  });
  collective_->finish_all_reduces_device(i);
}

// The average of every replica's weights and optimizer state, each replica weighted by its
// share of the global batch: sum over replicas of share * value, left on every replica.
void Trainer::average_weights() {
  auto average = [&](const std::function<Tensor(Replica&)>& pick) {
    std::vector<DeviceMemory> buffers;
    for (auto& r : replicas_) {
      r->device->axpby(pick(*r), pick(*r), 0.0f, r->share);
      buffers.push_back(pick(*r).memory());
    }
    collective_->all_reduce_sum(buffers, pick(*replicas_[0]).numel());
  };
  average([](Replica& r) { return r.net.parameters(); });
  for (auto& r : replicas_) r->compute_current = false;
  const size_t states = replicas_[0]->optimizer->state().size();
  for (size_t k = 0; k < states; ++k)
    average([k](Replica& r) { return r.optimizer->state()[k].second; });
}

}  // namespace trident
