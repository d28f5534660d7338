// The three commands of the `trident` CLI (options are parsed and checked in cli_options.cpp).
#include "models/cli.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

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
#include "models/zoo.h"
#include "models/trainer.h"

namespace trident {
namespace {

using Args = CliArgs;

std::vector<Device*> pick_devices(const CliTrainSettings& s) {
  auto& registry = DeviceRegistry::global();
  return !s.devices.empty() ? registry.device_list(s.devices) : registry.selected_devices();
}

// Reads only the samples the run uses (--train-limit / --test-limit apply while reading, so
// nothing past them is inflated or allocated), from an IDX directory or an .npz. Byte images
// get the recipe's normalisation (on the device); float samples are taken as they are.
DatasetSplits load_data(const CliTrainSettings& s, const ModelRecipe& recipe) {
  const std::string source = s.data.empty() ? default_data_directory() : s.data;
  DatasetLoadOptions options;
  options.train_limit = s.train_limit;
  options.test_limit = s.test_limit;
  DatasetSplits data = load_dataset(source, options);
  for (Dataset* split : {&data.train, &data.test})
    if (split->dtype() == DType::u8) split->set_normalization({true, {recipe.mean}, {recipe.std}});
  return data;
}

// The recipe's settings, overridden by the options given on the command line.
TrainOptions train_options(const CliArgs& a, const CliTrainSettings& s, const ModelRecipe& r) {
  TrainOptions o;
  o.batch = a.has("--batch") ? s.batch : r.batch;
  o.epochs = a.has("--epochs") ? s.epochs : r.epochs;
  o.optimizer = r.optimizer;
  if (a.has("--optimizer") && s.optimizer != r.optimizer.kind) {
    o.optimizer = OptimizerConfig{};  // another kind starts from its own defaults
    o.optimizer.kind = s.optimizer;
    o.optimizer.lr = s.optimizer == "sgd" ? 0.01f : 0.001f;
    if (s.optimizer == "sgd") o.optimizer.momentum = r.optimizer.momentum;
  }
  if (a.has("--lr")) o.optimizer.lr = s.lr;
  if (a.has("--momentum")) o.optimizer.momentum = s.momentum;
  if (a.has("--weight-decay")) o.optimizer.weight_decay = s.weight_decay;
  if (s.nesterov) o.optimizer.nesterov = true;
  if (s.no_nesterov) o.optimizer.nesterov = false;
  if (a.has("--clip-grad")) o.optimizer.clip_grad_norm = s.clip_grad;
  o.schedule = r.schedule;
  if (a.has("--schedule") && s.schedule != r.schedule.kind) {
    o.schedule = ScheduleConfig{};
    o.schedule.kind = s.schedule;
  }
  if (a.has("--max-lr")) o.schedule.max_lr = s.max_lr;
  if (a.has("--min-lr")) o.schedule.min_lr = s.min_lr;
  if (a.has("--gamma")) o.schedule.gamma = s.gamma;
  if (a.has("--warmup-steps")) o.schedule.warmup_steps = s.warmup_steps;
  if (a.has("--step-epochs")) o.schedule.step_epochs = s.step_epochs;
  if (o.schedule.kind == "onecycle" && !a.has("--lr"))  // OneCycleLR sets the lr itself
    o.optimizer.lr = o.schedule.max_lr > 0.0f ? o.schedule.max_lr / o.schedule.div_factor
                                              : o.optimizer.lr;
  o.loss = a.has("--loss") ? s.loss : r.loss;
  o.label_smoothing = s.label_smoothing;
  if (s.augment) {
    o.augment.crop_padding = s.crop_padding;
    o.augment.horizontal_flip = !s.no_flip;
  }
  o.seed = s.seed;
  o.capture = s.capture;
  o.average_every = s.average_every;
  validate(o.optimizer);
  validate(o.schedule);
  return o;
}

// The effective training settings of a model, for `trident train --help --model NAME`.
std::string describe_recipe(const ModelRecipe& r) {
  std::ostringstream s;
  s << "defaults for --model " << r.name << " (" << r.description << "):\n"
    << "  --batch " << r.batch << " --epochs " << r.epochs << " --optimizer " << r.optimizer.kind
    << " --lr " << r.optimizer.lr;
  if (r.optimizer.kind == "sgd")
    s << " --momentum " << r.optimizer.momentum << (r.optimizer.nesterov ? " --nesterov" : "");
  s << " --weight-decay " << r.optimizer.weight_decay << "\n  --schedule " << r.schedule.kind;
  if (r.schedule.kind == "onecycle")
    s << " --max-lr " << r.schedule.max_lr << " (30% warm-up, cosine, div factor 25, final div "
      << "factor 1e4, momentum 0.95 -> 0.85 -> 0.95)";
  s << " --loss " << r.loss << "\n  byte images normalised as (x / 255 - " << r.mean << ") / "
    << r.std << "\n";
  return s.str();
}

// Before any data is read or any epoch trained: the checkpoint path can be written (and, to
// resume, read), and temporaries that a killed write left beside it are removed.
void prepare_checkpoint(const CliTrainSettings& s, bool leader, std::ostream& err) {
  if (s.checkpoint.empty()) return;
  check_output_file_path(s.checkpoint, "--checkpoint");
  if (s.resume && !std::filesystem::exists(s.checkpoint))
    throw UsageError("--resume: checkpoint '" + path_for_message(s.checkpoint) + "' does not exist");
  if (!leader) return;  // the leader alone writes it, and cleans up after it
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
int train_with(const CliArgs& a, const CliTrainSettings& settings, const ProcessGroup& group,
               std::ostream& out, std::ostream& err) {
  const ModelRecipe& recipe = find_model(settings.model);
  TrainOptions options = train_options(a, settings, recipe);
  options.process_count = group.size;
  options.process_rank = group.rank;
  options.collective = group.collective;
  const int64_t epochs = options.epochs;
  const std::string& checkpoint = settings.checkpoint;
  const bool listed = !settings.devices.empty() || env_string("TRIDENT_DEVICES");
  const std::vector<Device*> devices = process_devices(pick_devices(settings), listed, group);
  const DatasetSplits data = load_data(settings, recipe);
  const int64_t classes = std::max<int64_t>(10, std::max(data.train.classes(), data.test.classes()));
  Trainer trainer(devices, recipe.factory(classes), data, options);
  if (settings.resume) trainer.load_checkpoint(checkpoint);
  const std::string device_names = trainer.device_names();
  const std::string model = recipe.name;
  err << "training " << model << " (" << trainer.network().parameter_count()
      << " parameters) on " << device_names
      << (group.size > 1 ? " (process 0 of " + std::to_string(group.size) + ")" : "") << ", "
      << data.train.size() << " samples of " << shape_string(data.train.sample_shape()) << " from "
      << data.source << ", batch " << options.batch
      << ", " << options.optimizer.kind << " lr " << options.optimizer.lr;
  if (options.schedule.kind != "none") err << " (" << options.schedule.kind << " schedule)";
  err << ", " << loss_name(trainer.loss().kind) << " loss";
  if (options.augment.enabled()) err << ", augmented";
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
    if (settings.json) out << epoch_json(s, e, device_names, model) << std::endl;
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
  return train_with(a, settings, group, out, err);
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
  const ModelRecipe& recipe = find_model(settings.model);
  TrainOptions options = train_options(a, settings, recipe);
  std::vector<Device*> devices = pick_devices(settings);
  devices.resize(1);  // evaluation runs on one device
  settings.train_limit = 1;  // the training split is not used: read a single sample of it
  const DatasetSplits data = load_data(settings, recipe);
  options.batch = 1;  // the trainer is used for evaluation only
  const int64_t classes = std::max<int64_t>(10, std::max(data.train.classes(), data.test.classes()));
  Trainer trainer(devices, recipe.factory(classes), data, options);
  trainer.load_checkpoint(checkpoint);
  const EvalStats e = trainer.evaluate();
  if (settings.json)
    out << json::ObjectWriter()
               .string("model", recipe.name)
               .number("test_loss", e.loss)
               .number("test_accuracy", e.accuracy)
               .integer("samples", e.samples)
               .string("device", trainer.device_names())
               .str()
        << std::endl;
  else
    out << recipe.name << " from " << checkpoint << ": test accuracy " << 100.0 * e.accuracy
        << "%, test loss " << e.loss << " (" << e.samples << " samples, "
        << trainer.device_names() << ")\n";
  return 0;
}

}  // namespace

int run_cli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  try {
    const Args a = parse_cli(argv);
    if (a.command == "help" || a.command == "--help" || a.flags.count("--help")) {
      out << kCliUsage;
      if (a.command == "train" || a.command == "eval" || a.values.count("--model"))
        out << "\n" << describe_recipe(find_model(a.get("--model", "cnn")));
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
