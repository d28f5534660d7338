// The three commands of the `trident` CLI (options are parsed and checked in cli_options.cpp).
#include "models/cli.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>

#include "core/dataset.h"
#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "core/idx.h"
#include "core/json.h"
#include "core/mpi/process_group.h"
#include "core/registry.h"
#include "core/safetensors.h"
#include "models/cli_options.h"
#include "models/progress.h"
#include "models/seed_models.h"
#include "models/trainer.h"

namespace trident {
namespace {

using Args = CliArgs;

std::vector<Device*> pick_devices(const CliTrainSettings& s) {
  auto& registry = DeviceRegistry::global();
  return !s.devices.empty() ? registry.device_list(s.devices) : registry.selected_devices();
}

// Reads only the samples the run uses (--train-limit / --test-limit apply while reading, so
// nothing past them is inflated or allocated), from an IDX directory or an .npz, and converts
// them to the trainer's normalized floats.
MnistSplits load_data(const CliTrainSettings& s) {
  const std::string source = s.data.empty() ? default_data_directory() : s.data;
  std::error_code ec;
  if (std::filesystem::is_directory(source, ec))
    return load_mnist_directory(source, 0.1307f, 0.3081f, 10, s.train_limit, s.test_limit);
  DatasetLoadOptions options;
  options.train_limit = s.train_limit;
  options.test_limit = s.test_limit;
  options.classes = 10;  // the seed models have ten outputs
  DatasetSplits loaded = load_dataset(source, options);
  MnistSplits data;
  data.directory = source;
  for (auto [from, to] : {std::pair<Dataset*, ImageDataset*>{&loaded.train, &data.train},
                          std::pair<Dataset*, ImageDataset*>{&loaded.test, &data.test}}) {
    const std::vector<int64_t>& shape = from->sample_shape();
    if (shape.size() != 3 || shape[0] != 1)
      throw FormatError(from->source() + ": the seed models take one-channel images (N x H x W), got samples of " +
                        "shape " + shape_string(shape));
    if (from->dtype() == DType::u8) from->set_normalization({true, {0.1307f}, {0.3081f}});
    to->count = from->size();
    to->height = shape[1];
    to->width = shape[2];
    to->images = from->normalized(0, from->size());
    to->labels = from->labels();
  }
  return data;
}

TrainOptions train_options(const CliTrainSettings& s) {
  TrainOptions o;
  o.model = s.model;
  make_model(o.model);  // validates the name early
  o.batch = s.batch;
  o.seed = s.seed;
  o.optimizer.kind = s.optimizer;
  o.optimizer.lr = s.lr;
  o.optimizer.momentum = s.momentum;
  o.optimizer.weight_decay = s.weight_decay;
  o.capture = s.capture;
  o.average_every = s.average_every;
  return o;
}

// Before any data is read or any epoch trained: the checkpoint path can be written (and, to
// resume, read), and temporaries that a killed write left beside it are removed.
void prepare_checkpoint(const CliTrainSettings& s, bool leader, std::ostream& err) {
  if (s.checkpoint.empty()) return;
  // Every process reads the checkpoint it resumes from; the leader alone writes it (on its own
  // machine, in a multi-machine job) and cleans up after it.
  if (leader) check_output_file_path(s.checkpoint, "--checkpoint");
  if (s.resume && !std::filesystem::exists(s.checkpoint))
    throw UsageError("--resume: checkpoint '" + path_for_message(s.checkpoint) + "' does not exist");
  if (!leader) return;
  if (const int removed = remove_stale_temporaries(s.checkpoint))
    err << "removed " << removed << " temporary file" << (removed == 1 ? "" : "s") << " left beside "
        << s.checkpoint << " by an interrupted checkpoint write\n";
}

int cmd_devices(std::ostream& out) {
  for (const auto& backend : DeviceRegistry::global().backends()) {
    out << backend.name << ": " << backend.devices.size() << " device"
        << (backend.devices.size() == 1 ? "" : "s");
    if (backend.devices.empty()) out << " (" << backend.why_none << ")";
    out << "\n";
    for (const auto& d : backend.devices) {
      const DeviceInfo& i = d->info();
      out << "  " << i.id() << "  " << i.name << "\n"
          << "      type " << i.type << ", " << i.compute_units << " compute units, "
          << (i.memory_bytes >> 20) << " MiB, vendor " << i.vendor << ", driver " << i.driver;
      if (!i.detail.empty()) out << ", " << i.detail;
      out << "\n";
    }
  }
  out << "default device: " << DeviceRegistry::global().default_device().info().id() << "\n";
  return 0;
}

// The train command once its settings are final (the model name may come from the checkpoint).
// Under mpirun every process runs this with its own share of the devices; only the leader
// (rank 0) prints and writes the checkpoint.
int train_with(const CliTrainSettings& settings, const ProcessGroup& group, std::ostream& out,
               std::ostream& err) {
  TrainOptions options = train_options(settings);
  options.process_count = group.size;
  options.process_rank = group.rank;
  options.collective = group.collective;
  const int64_t epochs = settings.epochs;
  const std::string& checkpoint = settings.checkpoint;
  const bool listed = !settings.devices.empty() || env_string("TRIDENT_DEVICES");
  const std::vector<Device*> devices = process_devices(pick_devices(settings), listed, group);
  const MnistSplits data = load_data(settings);
  Trainer trainer(devices, options, data);
  if (settings.resume) trainer.load_checkpoint(checkpoint);
  const std::string device_names = trainer.device_names();
  err << "training " << options.model << " (" << trainer.network().parameter_count()
      << " parameters) on " << device_names
      << (group.size > 1 ? " (process 0 of " + std::to_string(group.size) + ")" : "") << ", "
      << data.train.count << " samples from " << data.directory << ", batch " << options.batch
      << ", " << options.optimizer.kind << " lr " << options.optimizer.lr;
  if (devices.size() > 1 || group.size > 1)
    err << ", all-reduce through " << trainer.collective_name();
  err << "\n";
  ProgressPrinter progress(::isatty(STDERR_FILENO) == 1);
  if (trainer.epochs_done() >= epochs)
    err << "checkpoint already has " << trainer.epochs_done() << " epochs; nothing to do\n";
  while (trainer.epochs_done() < epochs) {
    const int64_t epoch = trainer.epochs_done() + 1;
    std::function<void(const Progress&)> report;  // a report reads the loss back: leader only
    if (group.leader())
      report = [&](const Progress& p) { progress.update(epoch, epochs, p, options.batch); };
    const EpochStats s = trainer.train_epoch(report);
    // Every process sees the same (all-reduced) loss, so all of them stop at the same epoch.
    const bool diverged = !std::isfinite(s.train_loss) && !settings.allow_nonfinite;
    if (!group.leader()) {
      if (diverged) throw Error("the training loss of epoch " + std::to_string(epoch) + " is not finite");
      continue;  // the replicas are identical: one evaluates and saves
    }
    const EvalStats e = trainer.evaluate();
    progress.finish_epoch(epoch, epochs, s, e, device_names);
    if (settings.json) out << epoch_json(s, e, device_names, options.model) << std::endl;
    if (diverged)  // weights that produce NaN are not worth a checkpoint: keep the last good one
      throw Error("the training loss of epoch " + std::to_string(epoch) + " is " +
                  (std::isnan(s.train_loss) ? "NaN" : "infinite") + ": the run diverged" +
                  (checkpoint.empty() ? "" : " (" + checkpoint + " was not overwritten)") +
                  ". Lower --lr (it is " + json::number(options.optimizer.lr) +
                  "), or pass --allow-nonfinite to keep training anyway");
    if (!checkpoint.empty()) trainer.save_checkpoint(checkpoint);
  }
  return 0;
}

int train(const Args& a, const ProcessGroup& group, std::ostream& out, std::ostream& err_all) {
  std::ostream discard(nullptr);  // writes to it do nothing
  std::ostream& err = group.leader() ? err_all : discard;
  CliTrainSettings settings = train_settings(a);
  prepare_checkpoint(settings, group.leader(), err);
  if (settings.resume && !a.values.count("--model")) settings.model = checkpoint_model_name(settings.checkpoint);
  return train_with(settings, group, out, err);
}

int cmd_train(const Args& a, std::ostream& out, std::ostream& err) {
  const ProcessGroup group = join_process_group();  // one process unless started by mpirun
  try {
    return train(a, group, out, err);
  } catch (const std::exception& e) {
    // The other processes would wait forever for this one's next all-reduce: end them all.
    if (group.size > 1)
      abort_process_group(group, e.what(), dynamic_cast<const UsageError*>(&e) ? 2 : 1, err);
    throw;
  }
}

int cmd_eval(const Args& a, std::ostream& out, std::ostream& err) {
  CliTrainSettings settings = train_settings(a);
  const std::string& checkpoint = settings.checkpoint;
  if (checkpoint.empty()) throw UsageError("eval needs --checkpoint FILE");
  settings.model = checkpoint_model_name(checkpoint);
  TrainOptions options = train_options(settings);
  std::vector<Device*> devices = pick_devices(settings);
  devices.resize(1);  // evaluation runs on one device
  settings.train_limit = 1;  // the training split is not used: read a single sample of it
  MnistSplits data = load_data(settings);
  options.batch = 1;  // the trainer is used for evaluation only
  Trainer trainer(devices, options, data);
  trainer.load_checkpoint(checkpoint);
  const EvalStats e = trainer.evaluate();
  if (settings.json)
    out << json::ObjectWriter()
               .string("model", options.model)
               .number("test_loss", e.loss)
               .number("test_accuracy", e.accuracy)
               .integer("samples", e.samples)
               .string("device", trainer.device_names())
               .str()
        << std::endl;
  else
    out << options.model << " from " << checkpoint << ": test accuracy " << 100.0 * e.accuracy
        << "%, test loss " << e.loss << " (" << e.samples << " samples, " << trainer.device_names() << ")\n";
  return 0;
}

}  // namespace

int run_cli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  try {
    const Args a = parse_cli(argv);
    if (a.command == "help" || a.command == "--help" || a.flags.count("--help")) {
      out << kCliUsage;
      return 0;
    }
    if (a.command == "devices") return cmd_devices(out);
    if (a.command == "train") return cmd_train(a, out, err);
    if (a.command == "eval") return cmd_eval(a, out, err);
    throw UsageError("unknown command '" + json::escape_for_message(a.command) + "'\n" + kCliUsage);
  } catch (const UsageError& e) {
    err << "trident: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "trident: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace trident
