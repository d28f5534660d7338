// Option table, typed option readers and the train settings of the `trident` CLI.
#include "trident/models/cli_options.h"

#include <cerrno>
#include <cfloat>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/json.h"
#include "trident/models/precision.h"

namespace trident {

const char* const kCliUsage = R"(usage: trident <command> [options]

commands:
  devices                 list every compiled-in backend, its devices, or why it has none
  train                   train a built-in model on a data set
  eval --checkpoint FILE  evaluate a checkpoint or weights file on the test split of a data set
                          (a weights file without metadata, e.g. PyTorch's, needs --model)
  predict --checkpoint FILE INPUT...  classify images (PNG, PGM) and .npy batches
  export-weights --checkpoint FILE --output W  write the weights alone (PyTorch loads them
                          with load_state_dict(..., strict=True))
  help                    this text (trident train --help --model NAME: that model's defaults)
  --version               the version and what this build has (backends, NCCL, MPI)

train options (a model's recipe gives the defaults of the training options; see --help):
  --model NAME              mlp, cnn, mlp-big or resnet (cnn)
  --epochs N                epochs to train in total, counting resumed ones; a schedule spans them
  --batch N                 global batch size, split across devices
  --optimizer sgd|adam|adamw  optimizer; switching kind starts from its defaults (lr 0.01 for
                            sgd, 0.001 for adam and adamw)
  --lr X                    learning rate (a schedule's base; onecycle takes --max-lr instead)
  --momentum X              SGD momentum
  --nesterov, --no-nesterov Nesterov momentum (SGD) on or off
  --weight-decay X          weight decay (L2 for sgd and adam, decoupled for adamw)
  --clip-grad X             clip the gradients' global L2 norm to X (0: off)
  --schedule none|step|cosine|onecycle  learning-rate schedule
  --max-lr X                onecycle: the peak learning rate
  --warmup-steps N          step, cosine: linear warm-up over N steps
  --step-epochs N, --gamma X  step: lr *= gamma every N epochs
  --min-lr X                cosine: the final learning rate
  --loss auto|cross_entropy|nll|mse  loss (auto: nll after a LogSoftmax, else cross_entropy)
  --label-smoothing X       cross-entropy label smoothing in [0, 1)
  --augment                 random crop (zero padding, --crop-padding N, default 2) and
                            horizontal flip (--no-flip: crop only) of training images, on the device
  --precision fp32|tf32|bf16|fp16  activations and GEMM/convolution inputs in this type, with
                            float32 master weights (TRIDENT_PRECISION, else fp32; fp16 with
                            dynamic loss scaling)
  --seed N                  seed of initial weights, shuffling, dropout and augmentation (1)
  --data DIR|FILE.npz       MNIST-format directory or NumPy .npz with x_train, y_train, x_test,
                            y_test (TRIDENT_DATA or /usr/share/datasets/fashion-mnist)
  --devices LIST            devices that train together, e.g. cuda:0,cuda:1 or cuda:all
                            (TRIDENT_DEVICES, else TRIDENT_BACKEND's or the best device)
  --sync allreduce|average:K|average
                            sum gradients every step, or average weights every K steps (average:
                            K measured so that averaging costs under a tenth of the time). Default:
                            allreduce for devices alike; for a mixed set (e.g. cuda:0,cpu:0)
                            average with --split speed
  --split even|speed|W,W..  the global batch over the devices: evenly, in proportion to their
                            measured speed (slow devices left out), or in the given proportions
  --checkpoint FILE         write a checkpoint (safetensors) after every epoch
  --resume                  continue from --checkpoint FILE
  --no-capture              run every step eagerly (no CUDA graph replay)
  --train-limit N           use only the first N training samples (quick runs)
  --test-limit N            use only the first N test samples
  --classes N               the model's outputs (default: the largest label + 1 of either split;
                            10 for the default Fashion-MNIST directory); labels must be below it
  --allow-nonfinite         keep training when an epoch's loss is NaN or infinite (default: stop, exit 1)
  --json                    print one JSON object per epoch on stdout

eval options: --checkpoint FILE, --model, --data, --devices (or --device: the first is used),
  --precision, --test-limit, --loss, --label-smoothing, --no-capture, --json, as for train (the
  model's classes are the file's)

predict options (trident predict --checkpoint FILE [options] INPUT...):
  INPUT                     a PNG or PGM (P2, P5) image, or a .npy batch (uint8 or float32,
                            N x C x H x W or N x H x W); uint8 pixels are normalised as the
                            model's recipe says, float32 values are taken as model inputs
  --checkpoint FILE         a training checkpoint or a weights file (safetensors)
  --model NAME              the model; default: the file's metadata (a file without it, e.g.
                            one PyTorch wrote, needs --model)
  --device ID               the device to run on, e.g. cpu, cuda:0, opencl:1 (default: the best)
  --top K                   print the K most probable classes (5)
  --labels FILE             class names, one per line (default: Fashion-MNIST's for 10 classes)
  --resize                  resize images of another size to the model's (bilinear); without
                            it such an image is an error. Gray and RGB images are converted to
                            the model's channels (RGB -> gray by ITU-R BT.601 luma)
  --batch N                 samples per forward pass (1000)
  --outputs FILE.npy        also write the raw outputs (logits, or log-probabilities for a model
                            ending in LogSoftmax) as float32 [N, classes]
  --json                    one JSON object per sample on stdout
  --precision fp32|tf32|bf16|fp16  run the network in this type (TRIDENT_PRECISION, else fp32);
                            the outputs are float32
  --no-capture              run every forward eagerly (no graph replay)

export-weights options:
  --checkpoint FILE         a training checkpoint or a weights file
  --output FILE             the weights-only safetensors file to write (atomically)
  --dtype f32|f16|bf16      the weights' type in the file (f32); num_batches_tracked stays int64
  --model NAME              as for predict
)";

namespace {

// Option -> takes a value.
const std::map<std::string, bool>& known_options() {
  static const std::map<std::string, bool> known = {
      {"--model", true},       {"--epochs", true},      {"--batch", true},
      {"--lr", true},          {"--momentum", true},    {"--weight-decay", true},
      {"--optimizer", true},   {"--seed", true},        {"--data", true},
      {"--devices", true},     {"--sync", true},        {"--checkpoint", true},
      {"--resume", false},     {"--no-capture", false}, {"--train-limit", true},
      {"--test-limit", true},  {"--json", false},       {"--help", false},
      {"--allow-nonfinite", false}, {"--schedule", true},  {"--max-lr", true},
      {"--warmup-steps", true}, {"--step-epochs", true},  {"--gamma", true},
      {"--min-lr", true},      {"--loss", true},        {"--label-smoothing", true}, {"--precision", true},
      {"--clip-grad", true},   {"--augment", false},    {"--crop-padding", true},
      {"--no-flip", false},    {"--nesterov", false},   {"--no-nesterov", false},
      {"--split", true},
      {"--device", true},      {"--top", true},         {"--labels", true},
      {"--resize", false},     {"--outputs", true},     {"--output", true},
      {"--dtype", true},       {"--classes", true}};
  return known;
}

// An option name or value as it may appear in a message: printable ASCII kept, the rest escaped.
std::string shown(const std::string& text) {
  std::string out;
  for (const char ch : text.substr(0, 200)) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return text.size() > 200 ? out + "...(" + std::to_string(text.size()) + " bytes)" : out;
}

}  // namespace

CliArgs parse_cli(const std::vector<std::string>& argv) {
  CliArgs args;
  if (argv.empty()) throw UsageError("no command given\n" + std::string(kCliUsage));
  args.command = argv[0];
  bool options_ended = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (options_ended || argv[i].rfind("--", 0) != 0) {
      args.positional.push_back(argv[i]);
      continue;
    }
    if (argv[i] == "--") {
      options_ended = true;
      continue;
    }
    std::string name = argv[i], value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = known_options().find(name);
    if (it == known_options().end()) throw UsageError("unknown option '" + shown(name) + "' (see trident help)");
    if (!it->second) {
      if (inline_value) throw UsageError(name + " takes no value");
      args.flags.insert(name);
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

std::string CliArgs::get(const std::string& option, const std::string& fallback) const {
  auto it = values.find(option);
  return it == values.end() ? fallback : it->second;
}

int64_t CliArgs::get_int(const std::string& option, int64_t fallback, int64_t min_value) const {
  auto it = values.find(option);
  if (it == values.end()) return fallback;
  const std::string& text = it->second;
  const bool digits = !text.empty() && text.find_first_not_of("0123456789-", 0) == std::string::npos &&
                      text.find('-', 1) == std::string::npos;
  if (digits) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno == ERANGE)
      throw UsageError(option + " '" + shown(text) + "' is out of range (at most " + std::to_string(INT64_MAX) + ")");
    if (*end == '\0' && end != text.c_str() && v >= min_value) return v;
  }
  throw UsageError(option + " '" + shown(text) + "' is not an integer >= " + std::to_string(min_value));
}

float CliArgs::get_float(const std::string& option, float fallback, float min_value) const {
  auto it = values.find(option);
  if (it == values.end()) return fallback;
  const std::string& text = it->second;
  const std::string head = option + " '" + shown(text) + "' ";
  char* end = nullptr;
  // strtod accepts leading blanks, "nan", "inf" and hex: only plain decimal numbers pass here.
  const bool plain = !text.empty() && text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  errno = 0;
  const double v = plain ? std::strtod(text.c_str(), &end) : 0.0;
  if (!plain || end == text.c_str() || *end != '\0') {
    const std::string lower = [&] {
      std::string s;
      for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return s;
    }();
    if (lower.find("nan") != std::string::npos || lower.find("inf") != std::string::npos)
      throw UsageError(head + "is not a finite number");
    throw UsageError(head + "is not a number");
  }
  if (!std::isfinite(v) || std::fabs(v) > FLT_MAX)
    throw UsageError(head + "overflows float (the largest float is about 3.4e38)");
  if (v != 0.0 && std::fabs(v) < FLT_MIN)
    throw UsageError(head + "underflows float (the smallest normal value is 1.2e-38)");
  if (v < min_value) throw UsageError(head + "must be >= " + json::number(min_value));
  return static_cast<float>(v);
}

namespace {

// --precision's value as precision_name spells it, "" when not given.
std::string precision_option(const CliArgs& a) {
  if (!a.has("--precision")) return "";
  try {
    return precision_name(parse_precision(a.get("--precision", "")));
  } catch (const UsageError& e) {
    throw UsageError(std::string("--precision: ") + e.what());
  }
}

}  // namespace

CliTrainSettings train_settings(const CliArgs& a) {
  CliTrainSettings s;
  s.model = a.get("--model", s.model);
  s.optimizer = a.get("--optimizer", s.optimizer);  // checked by make_optimizer
  s.data = a.get("--data", "");
  s.devices = a.get("--devices", a.get("--device", ""));  // --device: one device
  s.checkpoint = a.get("--checkpoint", "");
  if (a.values.count("--checkpoint") && s.checkpoint.empty())
    throw UsageError("--checkpoint '': the file name is empty (give a file path, e.g. --checkpoint run.safetensors)");
  s.epochs = a.get_int("--epochs", s.epochs, 1);
  s.batch = a.get_int("--batch", s.batch, 1);
  s.seed = static_cast<uint64_t>(a.get_int("--seed", 1, 0));
  s.train_limit = a.get_int("--train-limit", 0, 1);
  s.test_limit = a.get_int("--test-limit", 0, 1);
  s.classes = a.get_int("--classes", 0, 1);
  s.lr = a.get_float("--lr", s.optimizer == "sgd" ? 0.01f : 0.001f, 0.0f);
  s.momentum = a.get_float("--momentum", s.momentum, 0.0f);
  if (s.momentum >= 1.0f)
    throw UsageError("--momentum '" + a.get("--momentum", "") + "' must be below 1");
  s.weight_decay = a.get_float("--weight-decay", s.weight_decay, 0.0f);
  s.schedule = a.get("--schedule", s.schedule);
  s.max_lr = a.get_float("--max-lr", s.max_lr, 0.0f);
  s.min_lr = a.get_float("--min-lr", s.min_lr, 0.0f);
  s.gamma = a.get_float("--gamma", s.gamma, 0.0f);
  s.warmup_steps = a.get_int("--warmup-steps", s.warmup_steps, 0);
  s.step_epochs = a.get_int("--step-epochs", s.step_epochs, 1);
  s.loss = a.get("--loss", s.loss);
  s.label_smoothing = a.get_float("--label-smoothing", s.label_smoothing, 0.0f);
  s.precision = precision_option(a);
  if (s.label_smoothing >= 1.0f)
    throw UsageError("--label-smoothing '" + a.get("--label-smoothing", "") + "' must be below 1");
  s.clip_grad = a.get_float("--clip-grad", s.clip_grad, 0.0f);
  s.augment = a.flags.count("--augment") > 0 || a.values.count("--crop-padding") > 0;
  s.crop_padding = a.get_int("--crop-padding", s.crop_padding, 0);
  s.no_flip = a.flags.count("--no-flip") > 0;
  s.nesterov = a.flags.count("--nesterov") > 0;
  s.no_nesterov = a.flags.count("--no-nesterov") > 0;
  if (s.nesterov && s.no_nesterov) throw UsageError("--nesterov and --no-nesterov contradict");
  s.resume = a.flags.count("--resume") > 0;
  s.capture = a.flags.count("--no-capture") == 0;
  s.json = a.flags.count("--json") > 0;
  s.allow_nonfinite = a.flags.count("--allow-nonfinite") > 0;
  if (s.resume && s.checkpoint.empty()) throw UsageError("--resume needs --checkpoint FILE");
  s.sync_given = a.values.count("--sync") > 0;
  s.split = a.get("--split", s.split);
  const std::string sync = a.get("--sync", "allreduce");
  if (sync == "average") {
    s.average_every = -1;
  } else if (sync.rfind("average:", 0) == 0) {
    CliArgs k;
    k.values["--sync average:K"] = sync.substr(8);
    s.average_every = k.get_int("--sync average:K", 0, 1);
  } else if (sync != "allreduce") {
    throw UsageError("--sync '" + shown(sync) + "': use allreduce, average or average:K");
  }
  return s;
}

void reject_positional(const CliArgs& a) {
  if (!a.positional.empty())
    throw UsageError("trident " + shown(a.command) + ": unexpected argument '" +
                     shown(a.positional.front()) + "' (options start with --; see trident help)");
}

namespace {

std::string required_path(const CliArgs& a, const std::string& option, const char* example) {
  if (!a.values.count(option))
    throw UsageError("trident " + shown(a.command) + " needs " + option + " FILE");
  const std::string path = a.get(option, "");
  if (path.empty())
    throw UsageError(option + " '': the file name is empty (give a file path, e.g. " + option +
                     " " + example + ")");
  return path;
}

}  // namespace

namespace {

// The options of each command (beside --help); train reads every option of train_settings.
const std::map<std::string, std::set<std::string>>& command_options() {
  static const std::map<std::string, std::set<std::string>> options = [] {
    std::set<std::string> train;
    for (const auto& [name, takes_value] : known_options()) train.insert(name);
    for (const char* other : {"--top", "--labels", "--resize", "--outputs", "--output", "--dtype"})
      train.erase(other);
    return std::map<std::string, std::set<std::string>>{
        {"train", train},
        {"eval", {"--checkpoint", "--model", "--data", "--devices", "--device", "--precision",
                  "--test-limit", "--loss", "--label-smoothing", "--no-capture", "--json"}},
        {"predict", {"--checkpoint", "--model", "--device", "--precision", "--top", "--labels",
                     "--resize", "--batch", "--outputs", "--no-capture", "--json"}},
        {"export-weights", {"--checkpoint", "--output", "--dtype", "--model"}},
        {"devices", {}}};
  }();
  return options;
}

}  // namespace

void reject_foreign_options(const CliArgs& a) {
  const auto found = command_options().find(a.command);
  if (found == command_options().end()) return;  // help, or an unknown command (named later)
  const std::set<std::string>& allowed = found->second;
  std::vector<std::string> given(a.flags.begin(), a.flags.end());
  for (const auto& [name, value] : a.values) given.push_back(name);
  for (const std::string& name : given)
    if (name != "--help" && !allowed.count(name))
      throw UsageError("trident " + a.command + " does not take " + name +
                       " (trident help lists each command's options)");
}

CliPredictSettings predict_settings(const CliArgs& a) {
  CliPredictSettings s;
  s.checkpoint = required_path(a, "--checkpoint", "cnn.safetensors");
  s.model = a.get("--model", "");
  s.device = a.get("--device", "");
  s.labels = a.get("--labels", "");
  if (a.values.count("--labels") && s.labels.empty())
    throw UsageError("--labels '': the file name is empty");
  s.outputs = a.get("--outputs", "");
  if (a.values.count("--outputs") && s.outputs.empty())
    throw UsageError("--outputs '': the file name is empty");
  s.top = a.get_int("--top", s.top, 1);
  s.batch = a.get_int("--batch", s.batch, 1);
  s.precision = precision_option(a);
  s.json = a.flags.count("--json") > 0;
  s.resize = a.flags.count("--resize") > 0;
  s.capture = a.flags.count("--no-capture") == 0;
  s.inputs = a.positional;
  if (s.inputs.empty())
    throw UsageError("trident predict needs at least one INPUT (a PNG or PGM image, or a .npy "
                     "batch) after the options");
  return s;
}

CliExportSettings export_settings(const CliArgs& a) {
  reject_positional(a);
  CliExportSettings s;
  s.checkpoint = required_path(a, "--checkpoint", "run.safetensors");
  s.output = required_path(a, "--output", "weights.safetensors");
  s.model = a.get("--model", "");
  const std::string dtype = a.get("--dtype", "f32");
  if (dtype == "f32" || dtype == "float32") s.dtype = "f32";
  else if (dtype == "f16" || dtype == "float16" || dtype == "half") s.dtype = "f16";
  else if (dtype == "bf16" || dtype == "bfloat16") s.dtype = "bf16";
  else throw UsageError("--dtype '" + shown(dtype) + "': use f32, f16 or bf16");
  return s;
}

}  // namespace trident
