// The three commands of the `trident` CLI (options are parsed and checked in cli_options.cpp).
#include "trident/models/cli.h"

#include <unistd.h>

#include <climits>
#include <cmath>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

#include "trident/core/dataset.h"
#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/files.h"
#include "trident/core/idx.h"
#include "trident/core/job.h"
#include "trident/core/json.h"
#include "trident/core/mpi/process_group.h"
#include "trident/core/registry.h"
#include "trident/core/safetensors.h"
#include "trident/models/cli_options.h"
#include "trident/models/cli_predict.h"
#include "trident/models/progress.h"
#include "trident/models/state_dict.h"
#include "trident/models/zoo.h"
#include "trident/models/trainer.h"
#include "trident/version.h"

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
  // --classes, else the data's: Fashion-MNIST's 10 for the built-in default (a --train-limit
  // run may not meet every label), the largest label + 1 for any other data.
  options.classes = s.classes > 0 ? s.classes : source == kFashionMnistDirectory ? 10 : 0;
  DatasetSplits data = load_dataset(source, options);
  for (Dataset* split : {&data.train, &data.test})
    if (split->dtype() == DType::u8) split->set_normalization({true, {recipe.mean}, {recipe.std}});
  return data;
}

// The classes a model trained on data has: the data's (load_data: --classes or the labels), or,
// when a checkpoint or weights file is loaded into it, the file's (whose last layer fixes them),
// with data whose labels reach past them an error.
int64_t model_classes(const DatasetSplits& data, const ModelRecipe& recipe,
                      const ModelFile* file) {
  const int64_t in_data = std::max(data.train.classes(), data.test.classes());
  if (!file) return in_data;
  const int64_t in_file = classes_in_file(recipe, *file);
  if (in_data > in_file)
    throw UsageError(data.source + " has labels up to " + std::to_string(in_data - 1) + ", but " +
                     file->path + " holds a model with " + std::to_string(in_file) +
                     " classes (0 .. " + std::to_string(in_file - 1) + ")");
  return in_file;
}

// How many classes have no training sample: a run whose labels are sparse (e.g. one label of
// 1000000) would build that many outputs without a word.
int64_t classes_without_samples(const Dataset& train, int64_t classes) {
  std::vector<char> seen(size_t(classes), 0);
  for (const int32_t label : train.labels()) seen[size_t(label)] = 1;
  return classes - std::count(seen.begin(), seen.end(), char{1});
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
  if (o.schedule.kind == "onecycle") {  // OneCycleLR sets the lr itself, from max_lr
    if (a.has("--lr")) {
      std::ostringstream peak;
      peak << o.schedule.max_lr;
      throw UsageError("--lr has no effect with the onecycle schedule" +
                       std::string(a.has("--schedule") ? "" : " (--model " + r.name + "'s)") +
                       ": its learning rate rises from --max-lr / 25 to --max-lr (" + peak.str() +
                       ") and falls again; pass --max-lr, or --schedule none|step|cosine to "
                       "train at --lr");
    }
    o.optimizer.lr = o.schedule.max_lr > 0.0f ? o.schedule.max_lr / o.schedule.div_factor
                                              : o.optimizer.lr;
  }
  o.loss = a.has("--loss") ? s.loss : r.loss;
  o.label_smoothing = s.label_smoothing;
  if (s.augment) {
    o.augment.crop_padding = s.crop_padding;
    o.augment.horizontal_flip = !s.no_flip;
  }
  o.seed = s.seed;
  if (!s.precision.empty()) o.precision = parse_precision(s.precision);
  o.capture = s.capture;
  o.average_every = s.average_every;
  // Read here, as the Trainer would, so that the processes of a job compare what they use.
  o.overlap = env_flag("TRIDENT_OVERLAP", true);
  o.bucket_bytes = env_int("TRIDENT_BUCKET_MB", 16, 1, 1 << 20) * (int64_t(1) << 20);
  validate(o.optimizer);
  validate(o.schedule);
  return o;
}

// Whether a set of devices is mixed (different backends or models): then the default is to
// split the batch by speed and average weights every K steps, since a per-step all-reduce
// through the host would cost the fast device more than the slow one adds.
bool mixed_set(const std::vector<Device*>& devices) {
  for (Device* d : devices)
    if (d->info().backend != devices[0]->info().backend || d->info().name != devices[0]->info().name)
      return true;
  return false;
}

// --split and the defaults for mixed sets.
void apply_split(const CliTrainSettings& s, const std::vector<Device*>& devices,
                 TrainOptions& o) {
  const bool mixed = devices.size() > 1 && mixed_set(devices) && o.process_count == 1;
  std::string split = s.split;
  if (mixed && !s.sync_given) o.average_every = -1;
  if (mixed && split == "even" && !s.sync_given) split = "speed";
  if (split == "speed") {
    o.split_by_speed = true;
  } else if (split != "even") {
    for (const std::string& part : trident::split(split, ',')) {
      CliArgs one;
      one.values["--split"] = part;
      o.split.push_back(one.get_float("--split", 0.0f, 0.0f));
    }
  }
}

// What the processes of a job compare before their first step (agree_on_settings).
JobSettings job_settings(const std::string& model, const TrainOptions& o, const Trainer& trainer,
                         size_t devices, int64_t train_samples) {
  JobSettings s;
  s.devices_per_process = static_cast<int64_t>(devices);
  s.global_batch = o.batch;
  s.average_every = o.average_every;
  s.overlap = o.overlap ? 1 : 0;
  s.bucket_bytes = o.bucket_bytes;
  s.seed = static_cast<int64_t>(o.seed);
  s.resumed_step = trainer.global_step();
  s.epochs = o.epochs;
  s.train_samples = train_samples;
  s.model = settings_hash(model);
  char optimizer[400];  // %a: every bit of the floats
  std::snprintf(optimizer, sizeof(optimizer),
                "%s lr %a momentum %a nesterov %d weight decay %a clip %a schedule %s max %a "
                "min %a gamma %a warmup %lld step %lld loss %s smoothing %a crop %lld flip %d "
                "precision %s",
                o.optimizer.kind.c_str(), o.optimizer.lr, o.optimizer.momentum,
                int(o.optimizer.nesterov), o.optimizer.weight_decay, o.optimizer.clip_grad_norm,
                o.schedule.kind.c_str(), o.schedule.max_lr, o.schedule.min_lr, o.schedule.gamma,
                static_cast<long long>(o.schedule.warmup_steps),
                static_cast<long long>(o.schedule.step_epochs), o.loss.c_str(),
                o.label_smoothing, static_cast<long long>(o.augment.crop_padding),
                int(o.augment.horizontal_flip), precision_name(trainer.precision()));
  s.optimizer = settings_hash(optimizer);
  return s;
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
  // Chosen before the line starts: an unknown TRIDENT_BACKEND ends the listing with its error.
  const std::string chosen = DeviceRegistry::global().default_device().info().id();
  out << "default device: " << chosen << "\n";
  return 0;
}

// The train command once its settings are final (the model name may come from the checkpoint).
// Under mpirun every process runs this with its own share of the devices; only the leader
// (rank 0) prints and writes the checkpoint.
int train_with(const CliArgs& a, const CliTrainSettings& settings, const ProcessGroup& group,
               std::ostream& out, std::ostream& err, std::ostream& err_all) {
  const ModelRecipe& recipe = find_model(settings.model);
  TrainOptions options = train_options(a, settings, recipe);
  options.process_count = group.size;
  options.process_rank = group.rank;
  options.collective = group.collective;
  const int64_t epochs = options.epochs;
  const std::string& checkpoint = settings.checkpoint;
  // Under a launcher the registry opens only this process's share of the devices.
  std::optional<std::string> list = env_string("TRIDENT_DEVICES");
  if (!settings.devices.empty()) list = settings.devices;
  DeviceRegistry::limit_global_discovery(process_discovery_scope(list, group));
  const std::vector<Device*> devices = process_devices(DeviceRegistry::global(), list, group);
  const DatasetSplits data = load_data(settings, recipe);
  std::optional<ModelFile> resumed;
  if (settings.resume) resumed = read_model_file(checkpoint, recipe.name);
  const int64_t classes = model_classes(data, recipe, resumed ? &*resumed : nullptr);
  if (const int64_t empty = classes_without_samples(data.train, classes); 2 * empty > classes)
    err << "trident: warning: " << empty << " of the " << classes << " classes have no training "
        << "sample (labels 0 .. " << classes - 1 << "); pass --classes N if there are N\n";
  apply_split(settings, devices, options);
  Trainer trainer(devices, recipe.factory(classes), data, options);
  if (!trainer.balance_report().empty()) err << trainer.balance_report() << "\n";
  // Tests only: this process fails once training reaches that global step (a rank failing
  // mid-run, tests/mpi/run_mpi_failure_check.sh).
  const long fail_at_step = env_int("TRIDENT_TEST_FAIL_AT_STEP", 0, 0, LONG_MAX);
  auto run = [&]() -> int {
    if (settings.resume) trainer.load_checkpoint(checkpoint);
    agree_on_settings(group, job_settings(recipe.name, options, trainer, devices.size(),
                                          data.train.size()));
    const std::string device_names = trainer.device_names();
    const std::string model = recipe.name;
    err << "training " << model << " (" << trainer.network().parameter_count()
        << " parameters) on " << device_names
        << (group.size > 1 ? " (process 0 of " + std::to_string(group.size) + ")" : "") << ", "
        << data.train.size() << " samples of " << shape_string(data.train.sample_shape())
        << " in " << classes << " classes from " << data.source << ", batch " << options.batch
        << ", " << options.optimizer.kind;
    if (options.schedule.kind == "onecycle")
      err << " max lr " << options.schedule.max_lr << " (onecycle schedule)";
    else
      err << " lr " << options.optimizer.lr;
    if (options.schedule.kind != "none" && options.schedule.kind != "onecycle")
      err << " (" << options.schedule.kind << " schedule)";
    err << ", " << loss_name(trainer.loss().kind) << " loss, " << precision_name(trainer.precision());
    if (options.augment.enabled()) err << ", augmented";
    if (devices.size() > 1 || group.size > 1)
      err << ", " << trainer.sync_description() << " through " << trainer.collective_name();
    err << "\n";
    ProgressPrinter progress(::isatty(STDERR_FILENO) == 1);
    if (trainer.epochs_done() >= epochs)
      err << "checkpoint already has " << trainer.epochs_done() << " epochs; nothing to do\n";
    while (trainer.epochs_done() < epochs) {
      const int64_t epoch = trainer.epochs_done() + 1;
      std::function<void(const Progress&)> report;  // a report reads the loss back: leader only
      if (group.leader() || fail_at_step > 0)
        report = [&](const Progress& p) {
          if (fail_at_step > 0 && trainer.global_step() >= fail_at_step)
            throw Error("failing at step " + std::to_string(trainer.global_step()) +
                        " as TRIDENT_TEST_FAIL_AT_STEP asks");
          if (group.leader()) progress.update(epoch, epochs, p, options.batch);
        };
      const EpochStats s = trainer.train_epoch(report, fail_at_step > 0 ? 0.0 : 0.5);
      // Every process sees the same (all-reduced) loss, so all of them stop at the same epoch.
      const bool diverged = !std::isfinite(s.train_loss) && !settings.allow_nonfinite;
      if (!group.leader()) {
        if (diverged)
          throw Error("the training loss of epoch " + std::to_string(epoch) + " is not finite");
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
  };
  // From here a failure under a launcher ends the job at once, while the Trainer (its
  // communicator and captured steps) is alive: unwinding first would destroy them, which can
  // wait forever for peers that will never match the work queued (issue 14, finding 2).
  try {
    return run();
  } catch (const std::exception& e) {
    if (group.size > 1)
      abort_process_group(group, e.what(), dynamic_cast<const UsageError*>(&e) ? 2 : 1, err_all);
    throw;
  }
}

int train(const Args& a, const ProcessGroup& group, std::ostream& out, std::ostream& err_all) {
  std::ostream discard(nullptr);  // writes to it do nothing
  std::ostream& err = group.leader() ? err_all : discard;
  CliTrainSettings settings = train_settings(a);
  prepare_checkpoint(settings, group.leader(), err);
  if (settings.resume && !a.values.count("--model")) settings.model = checkpoint_model_name(settings.checkpoint);
  return train_with(a, settings, group, out, err, err_all);
}

int cmd_train(const Args& a, std::ostream& out, std::ostream& err) {
  const ProcessGroup group = join_process_group();  // one process unless started by a launcher
  try {
    return train(a, group, out, err);
  } catch (const std::exception& e) {
    // Failures before the Trainer exists (train_with() ends the job itself after): the other
    // processes would wait forever for this one's next all-reduce, so end them all.
    if (group.size > 1)
      abort_process_group(group, e.what(), dynamic_cast<const UsageError*>(&e) ? 2 : 1, err);
    throw;
  }
}

int cmd_eval(const Args& a, std::ostream& out, std::ostream& /*err*/) {
  CliTrainSettings settings = train_settings(a);
  const std::string& checkpoint = settings.checkpoint;
  if (checkpoint.empty()) throw UsageError("eval needs --checkpoint FILE");
  // A training checkpoint, or a weights file (from export-weights, save_weights or PyTorch).
  const ModelFile model_file = read_model_file(checkpoint, a.get("--model", ""));
  settings.model = model_file.model;
  const ModelRecipe& recipe = find_model(settings.model);
  TrainOptions options = train_options(a, settings, recipe);
  std::vector<Device*> devices = pick_devices(settings);
  devices.resize(1);  // evaluation runs on one device
  settings.train_limit = 1;  // the training split is not used: read a single sample of it
  const DatasetSplits data = load_data(settings, recipe);
  options.batch = 1;  // the trainer is used for evaluation only
  const int64_t classes = model_classes(data, recipe, &model_file);
  Trainer trainer(devices, recipe.factory(classes), data, options);
  if (model_file.checkpoint)
    trainer.load_checkpoint(checkpoint);
  else
    load_weights(trainer.network(), model_file.file, checkpoint, /*strict=*/true);
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
    if (a.command == "--version") {
      out << "trident " << TRIDENT_VERSION_STRING << " (" << TRIDENT_BUILD_FEATURES << ")\n";
      return 0;
    }
    reject_foreign_options(a);
    if (a.command == "predict") return cmd_predict(a, out, err);
    if (a.command == "export-weights") return cmd_export_weights(a, out, err);
    reject_positional(a);
    if (a.command == "devices") return cmd_devices(out);
    if (a.command == "train") return cmd_train(a, out, err);
    if (a.command == "eval") return cmd_eval(a, out, err);
    throw UsageError("unknown command '" + json::escape_for_message(a.command) + "'\n" + kCliUsage);
  } catch (const UsageError& e) {
    err << "trident: " << e.what() << "\n";
    return 2;
  } catch (const DeviceNotFound& e) {  // a device or backend name that names nothing here
    err << "trident: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "trident: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace trident
