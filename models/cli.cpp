// Command-line parsing and the three commands.
#include "trident/models/cli.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include "trident/core/error.h"
#include "trident/core/env.h"
#include "trident/core/idx.h"
#include "trident/core/mpi/process_group.h"
#include "trident/core/registry.h"
#include "trident/models/progress.h"
#include "trident/models/seed_models.h"
#include "trident/models/trainer.h"
#include "trident/version.h"

namespace trident {
namespace {

const char* kUsage = R"(usage: trident <command> [options]

commands:
  devices                 list every compiled-in backend, its devices, or why it has none
  train                   train a model on an MNIST-format data set
  eval --checkpoint FILE  evaluate a checkpoint on the test set
  help                    this text
  --version               the version and what this build has (backends, NCCL, MPI)

train options (defaults are the MNIST notebook's):
  --model mlp|cnn|mlp-big   model to train (cnn)
  --epochs N                epochs to train in total, counting resumed ones (1)
  --batch N                 global batch size, split across devices (200)
  --lr X                    learning rate (0.01)
  --momentum X              SGD momentum (0.5)
  --weight-decay X          L2 weight decay (0)
  --optimizer sgd|adam      optimizer (sgd)
  --seed N                  seed of initial weights, shuffling and dropout (1)
  --data DIR                MNIST-format directory (TRIDENT_DATA or /usr/share/datasets/fashion-mnist)
  --devices LIST            devices that train together, e.g. cuda:0,cuda:1 or cuda:all
                            (TRIDENT_DEVICES, else TRIDENT_BACKEND's or the best device)
  --sync allreduce|average:K  sum gradients every step (default) or average weights every K steps
  --checkpoint FILE         write a checkpoint (safetensors) after every epoch
  --resume                  continue from --checkpoint FILE
  --no-capture              run every step eagerly (no CUDA graph replay)
  --train-limit N           use only the first N training samples (quick runs)
  --test-limit N            use only the first N test samples
  --json                    print one JSON object per epoch on stdout
)";

struct Args {
  std::string command;
  std::map<std::string, std::string> values;
  std::map<std::string, bool> flags;
};

Args parse(const std::vector<std::string>& argv) {
  static const std::map<std::string, bool> known = {  // option -> takes a value
      {"--model", true},       {"--epochs", true},     {"--batch", true},
      {"--lr", true},          {"--momentum", true},   {"--weight-decay", true},
      {"--optimizer", true},   {"--seed", true},       {"--data", true},
      {"--devices", true},     {"--sync", true},       {"--checkpoint", true},
      {"--resume", false},     {"--no-capture", false}, {"--train-limit", true},
      {"--test-limit", true},  {"--json", false},      {"--help", false}};
  Args args;
  if (argv.empty()) throw UsageError("no command given\n" + std::string(kUsage));
  args.command = argv[0];
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string name = argv[i], value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) { value = name.substr(eq + 1); name = name.substr(0, eq); }
    auto it = known.find(name);
    if (it == known.end()) throw UsageError("unknown option '" + name + "' (see trident help)");
    if (!it->second) {
      if (inline_value) throw UsageError(name + " takes no value");
      args.flags[name] = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) throw UsageError(name + " needs a value");
      value = argv[++i];
    }
    args.values[name] = value;
  }
  return args;
}

int64_t get_int(const Args& a, const std::string& name, int64_t fallback, int64_t min_value) {
  auto it = a.values.find(name);
  if (it == a.values.end()) return fallback;
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    if (used == it->second.size() && v >= min_value) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(name + " '" + it->second + "' is not an integer >= " + std::to_string(min_value));
}

float get_float(const Args& a, const std::string& name, float fallback) {
  auto it = a.values.find(name);
  if (it == a.values.end()) return fallback;
  try {
    size_t used = 0;
    const float v = std::stof(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(name + " '" + it->second + "' is not a number");
}

std::string get(const Args& a, const std::string& name, const std::string& fallback) {
  auto it = a.values.find(name);
  return it == a.values.end() ? fallback : it->second;
}

std::vector<Device*> pick_devices(const Args& a) {
  auto& registry = DeviceRegistry::global();
  auto it = a.values.find("--devices");
  return it != a.values.end() ? registry.device_list(it->second) : registry.selected_devices();
}

MnistSplits load_data(const Args& a) {
  MnistSplits data = load_mnist_directory(get(a, "--data", default_data_directory()));
  auto limit = [](ImageDataset& d, int64_t n) {
    if (n <= 0 || n >= d.count) return;
    d.count = n;
    d.images.resize(static_cast<size_t>(n * d.height * d.width));
    d.labels.resize(static_cast<size_t>(n));
  };
  limit(data.train, get_int(a, "--train-limit", 0, 1));
  limit(data.test, get_int(a, "--test-limit", 0, 1));
  return data;
}

TrainOptions train_options(const Args& a) {
  TrainOptions o;
  o.model = get(a, "--model", "cnn");
  make_model(o.model);  // validates the name early
  o.batch = get_int(a, "--batch", 200, 1);
  o.seed = static_cast<uint64_t>(get_int(a, "--seed", 1, 0));
  o.optimizer.kind = get(a, "--optimizer", "sgd");
  o.optimizer.lr = get_float(a, "--lr", o.optimizer.kind == "adam" ? 0.001f : 0.01f);
  o.optimizer.momentum = get_float(a, "--momentum", 0.5f);
  o.optimizer.weight_decay = get_float(a, "--weight-decay", 0.0f);
  o.capture = !a.flags.count("--no-capture");
  const std::string sync = get(a, "--sync", "allreduce");
  if (sync.rfind("average:", 0) == 0) {
    Args k;
    k.values["--sync average:K"] = sync.substr(8);
    o.average_every = get_int(k, "--sync average:K", 0, 1);
  } else if (sync != "allreduce") {
    throw UsageError("--sync '" + sync + "': use allreduce or average:K");
  }
  return o;
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

// Under mpirun every process runs this with its own share of the devices; only the leader
// (rank 0) prints and writes the checkpoint.
int train(const Args& a, const ProcessGroup& group, std::ostream& out, std::ostream& err_all) {
  std::ostream discard(nullptr);  // writes to it do nothing
  std::ostream& err = group.leader() ? err_all : discard;
  TrainOptions options = train_options(a);
  options.process_count = group.size;
  options.process_rank = group.rank;
  options.collective = group.collective;
  const int64_t epochs = get_int(a, "--epochs", 1, 1);
  const std::string checkpoint = get(a, "--checkpoint", "");
  const bool resume = a.flags.count("--resume") > 0;
  const bool json = a.flags.count("--json") > 0;
  if (resume && checkpoint.empty()) throw UsageError("--resume needs --checkpoint FILE");
  if (resume && !std::filesystem::exists(checkpoint))
    throw UsageError("--resume: checkpoint '" + checkpoint + "' does not exist");
  if (resume && !a.values.count("--model")) options.model = checkpoint_model_name(checkpoint);
  const bool listed = a.values.count("--devices") || env_string("TRIDENT_DEVICES");
  const std::vector<Device*> devices = process_devices(pick_devices(a), listed, group);
  const MnistSplits data = load_data(a);
  Trainer trainer(devices, options, data);
  if (resume) trainer.load_checkpoint(checkpoint);
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
    if (!group.leader()) continue;  // the replicas are identical: one evaluates and saves
    const EvalStats e = trainer.evaluate();
    progress.finish_epoch(epoch, epochs, s, e, device_names);
    if (json) out << epoch_json(s, e, device_names, options.model) << std::endl;
    if (!checkpoint.empty()) trainer.save_checkpoint(checkpoint);
  }
  return 0;
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

int cmd_eval(const Args& a, std::ostream& out, std::ostream& /*err*/) {
  const std::string checkpoint = get(a, "--checkpoint", "");
  if (checkpoint.empty()) throw UsageError("eval needs --checkpoint FILE");
  TrainOptions options = train_options(a);
  options.model = checkpoint_model_name(checkpoint);
  std::vector<Device*> devices = pick_devices(a);
  devices.resize(1);  // evaluation runs on one device
  MnistSplits data = load_data(a);
  options.batch = 1;  // the trainer is used for evaluation only
  Trainer trainer(devices, options, data);
  trainer.load_checkpoint(checkpoint);
  const EvalStats e = trainer.evaluate();
  if (a.flags.count("--json"))
    out << "{\"model\": \"" << options.model << "\", \"test_loss\": " << e.loss
        << ", \"test_accuracy\": " << e.accuracy << ", \"samples\": " << e.samples
        << ", \"device\": \"" << trainer.device_names() << "\"}" << std::endl;
  else
    out << options.model << " from " << checkpoint << ": test accuracy "
        << 100.0 * e.accuracy << "%, test loss " << e.loss << " (" << e.samples << " samples, "
        << trainer.device_names() << ")\n";
  return 0;
}

}  // namespace

int run_cli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  try {
    const Args a = parse(argv);
    if (a.command == "help" || a.command == "--help" || a.flags.count("--help")) {
      out << kUsage;
      return 0;
    }
    if (a.command == "--version") {
      out << "trident " << TRIDENT_VERSION_STRING << " (" << TRIDENT_BUILD_FEATURES << ")\n";
      return 0;
    }
    if (a.command == "devices") return cmd_devices(out);
    if (a.command == "train") return cmd_train(a, out, err);
    if (a.command == "eval") return cmd_eval(a, out, err);
    throw UsageError("unknown command '" + a.command + "'\n" + kUsage);
  } catch (const UsageError& e) {
    err << "trident: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "trident: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace trident
