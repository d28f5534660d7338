// How the Trainer divides its global batch among its devices: evenly, by the given shares, or
// by speed (each replica's step timed alone, then the set against its fastest member).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/models/replica.h"

namespace trident {

void Trainer::resize_replica_batch(Replica& r, int64_t batch, int64_t offset) {
  r.batch = batch;
  r.offset = offset;
  r.share = static_cast<float>(double(batch) / double(options_.batch));
  Device& d = *r.device;
  r.index_table = Tensor::empty(d, {std::max<int64_t>(steps_per_epoch() * batch, 1)}, DType::i32);
  r.labels = Tensor::empty(d, {std::max<int64_t>(batch, 1)}, DType::i32);
}

// Seconds of replica i's forward and backward at its present batch, as training runs them:
// replayed from a capture where the device captures (a GPU alone replays one graph per step,
// several times faster than launching it), else eagerly; the best of three after an eager
// warm-up (which also allocates what this batch size needs). Batch-norm statistics the probe
// touches are put back; nothing else changes (no update runs).
double Trainer::probe_step_seconds(size_t i) {
  Replica& r = *replicas_[i];
  const Tensor saved = r.net.buffers().defined() ? Tensor::empty(*r.device, r.net.buffers().shape())
                                                : Tensor();
  if (saved.defined()) saved.copy_from(r.net.buffers());
  const std::function<void()> step = [this, i] {
    forward(i);
    backward(i);
  };
  step();
  r.device->synchronize();
  std::unique_ptr<CapturedWork> captured = options_.capture ? r.device->capture(step) : nullptr;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    r.device->synchronize();
    const double t0 = now_seconds();
    if (captured) captured->replay(); else step();
    r.device->synchronize();
    best = std::min(best, now_seconds() - t0);
  }
  captured.reset();
  if (saved.defined()) r.net.buffers().copy_from(saved);
  return best;
}

// Times each replica alone at an even share, then gives each a share of the batch proportional to
// its speed; a device that would take under 1% is left out. Then the set is timed at those shares
// (its step lasts as long as its slowest member's) against its fastest device alone with the
// whole batch, and where the set is not at least 10% faster, only the fastest device trains:
// adding a device never makes training slower (issue 14). A linear speed model alone misleads
// both ways: a CPU's few samples of a wide MLP are bound by reading the weights, not by the
// samples, and a GPU's step replayed from one graph costs a fraction of its launches.
void Trainer::balance_by_speed() {
  if (options_.process_count > 1)
    throw UsageError("split_by_speed works within one process only");
  const size_t n = replicas_.size();
  if (n < 2) return;
  upload_epoch_tables(1);
  std::vector<double> seconds(n);
  for (size_t i = 0; i < n; ++i) seconds[i] = probe_step_seconds(i);
  // Samples per second at the even share, then shares in proportion.
  std::vector<double> speed(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    speed[i] = double(replicas_[i]->batch) / seconds[i];
    total += speed[i];
  }
  std::ostringstream report;
  report << "batch split by measured speed:";
  std::vector<double> shares;
  std::vector<size_t> kept;
  for (size_t i = 0; i < n; ++i) {
    const double share = speed[i] / total;
    report << " " << replicas_[i]->device->info().id() << " " << std::llround(speed[i])
           << " samples/s";
    if (share * double(options_.batch) < std::max(1.0, 0.01 * double(options_.batch))) {
      report << " (left out: it would take under 1% of the batch)";
      continue;
    }
    kept.push_back(i);
    shares.push_back(share);
  }
  // The set at those shares against its fastest device alone with the whole batch.
  if (kept.size() > 1) {
    size_t fastest = kept[0];
    for (size_t i : kept)
      if (speed[i] > speed[fastest]) fastest = i;
    TrainOptions kept_options = options_;
    kept_options.split = shares;
    const std::vector<int64_t> kept_sizes = batch_split(kept_options, kept.size());
    int64_t offset = 0;
    for (size_t k = 0; k < kept.size(); ++k) {
      resize_replica_batch(*replicas_[kept[k]], kept_sizes[k], offset);
      offset += kept_sizes[k];
    }
    upload_epoch_tables(1);
    double set_seconds = 0.0;
    for (size_t i : kept) set_seconds = std::max(set_seconds, probe_step_seconds(i));
    resize_replica_batch(*replicas_[fastest], options_.batch, 0);
    upload_epoch_tables(1);
    const double alone_seconds = probe_step_seconds(fastest);
    if (!(set_seconds < 0.9 * alone_seconds)) {
      report << "; the set would step in " << std::llround(set_seconds * 1e6) << " us, "
             << replicas_[fastest]->device->info().id() << " alone in "
             << std::llround(alone_seconds * 1e6) << " us: the others are left out";
      kept = {fastest};
      shares = {1.0};
    }
  }
  // Drop the devices left out (their threads, data and network go with them).
  if (kept.size() < n) {
    std::vector<std::unique_ptr<Replica>> remaining;
    for (size_t i : kept) remaining.push_back(std::move(replicas_[i]));
    for (auto& r : replicas_)
      if (r) {
        r->captured.reset();
        r->device->synchronize();
      }
    replicas_ = std::move(remaining);
    for (size_t k = 0; k < replicas_.size(); ++k) replicas_[k]->rank = k;
    std::vector<Device*> devices;
    for (auto& r : replicas_) devices.push_back(r->device);
    collective_.reset();
    collective_ = options_.collective ? options_.collective(devices) : make_collective(devices);
    replica_count_ = static_cast<int64_t>(replicas_.size());
    workers_ = std::make_unique<ReplicaWorkers>(replicas_.size());
  }
  TrainOptions split_options = options_;
  split_options.split = shares;
  const std::vector<int64_t> sizes = batch_split(split_options, replicas_.size());
  int64_t offset = 0;
  for (size_t k = 0; k < replicas_.size(); ++k) {
    resize_replica_batch(*replicas_[k], sizes[k], offset);
    offset += sizes[k];
  }
  report << "; batch " << options_.batch << " split";
  for (size_t k = 0; k < replicas_.size(); ++k)
    report << (k ? " + " : " ") << sizes[k] << " (" << replicas_[k]->device->info().id() << ")";
  // Weight averaging every K steps: K such that averaging costs at most a tenth of the steps.
  if (options_.average_every == -1) {
    int64_t every = 1;
    if (replicas_.size() > 1) {
      for (auto& r : replicas_) r->device->synchronize();
      const double t0 = now_seconds();
      average_weights();
      for (auto& r : replicas_) r->device->synchronize();
      const double average_s = now_seconds() - t0;
      double kept_speed = 0.0;
      for (size_t i : kept) kept_speed += speed[i];
      const double step_s = double(options_.batch) / kept_speed;  // the balanced set's step
      every = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(10.0 * average_s / step_s)), 1,
                                  1000);
      report << "; weights averaged every " << every << " steps (an average took "
             << std::llround(average_s * 1e6) << " us)";
    }
    options_.average_every = every;
  }
  if (replicas_.size() == 1 && options_.average_every != 0) {
    options_.average_every = 0;  // one device left: nothing to average
    report << "; one device left: plain steps";
  }
  balance_report_ = report.str();
  choose_strategy();
}

// The samples of a global batch each local device takes: even, or in the proportions asked
// (TrainOptions::split; one process only, every device at least one sample).
std::vector<int64_t> Trainer::batch_split(const TrainOptions& o, size_t local) {
  const int64_t n = static_cast<int64_t>(local) * o.process_count;
  if (o.split.empty()) {
    if (o.batch <= 0 || o.batch % n != 0)
      throw UsageError("batch " + std::to_string(o.batch) + " must be a positive multiple of the " +
                       std::to_string(n) + " devices (or split it unevenly with --split)");
    return std::vector<int64_t>(local, o.batch / n);
  }
  if (o.process_count > 1)
    throw UsageError("an uneven batch split works within one process only");
  if (o.split.size() != local)
    throw UsageError("the batch split has " + std::to_string(o.split.size()) + " shares for " +
                     std::to_string(local) + " devices");
  double total = 0.0;
  for (double w : o.split) {
    if (!(w > 0.0) || !std::isfinite(w)) throw UsageError("batch split shares must be positive");
    total += w;
  }
  std::vector<int64_t> sizes(local);
  int64_t given = 0;
  for (size_t i = 0; i < local; ++i) {
    sizes[i] = std::max<int64_t>(1, static_cast<int64_t>(std::llround(o.batch * o.split[i] / total)));
    given += sizes[i];
  }
  // Rounding leftovers go to (or come from) the largest share.
  const size_t largest = size_t(std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
  sizes[largest] += o.batch - given;
  if (sizes[largest] < 1 || o.batch < static_cast<int64_t>(local))
    throw UsageError("batch " + std::to_string(o.batch) + " is too small to split over " +
                     std::to_string(local) + " devices");
  return sizes;
}

}  // namespace trident
