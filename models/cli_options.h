// The `trident` command line parsed and checked without running anything: the option table, the
// typed readers with their error messages, and the train/eval settings (also the fuzz target).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace trident {

extern const char* const kCliUsage;

// argv (without the program name) split into the command, options with values and flags.
struct CliArgs {
  std::string command;
  std::map<std::string, std::string> values;  // "--lr" -> "0.1"
  std::set<std::string> flags;                // "--json"
  std::vector<std::string> positional;        // arguments that are not options (predict's inputs)

  bool has(const std::string& option) const { return values.count(option) > 0 || flags.count(option) > 0; }
  std::string get(const std::string& option, const std::string& fallback) const;
  // An integer >= min_value; UsageError naming the option otherwise (out of range included).
  int64_t get_int(const std::string& option, int64_t fallback, int64_t min_value) const;
  // A finite float >= min_value; UsageError naming the option for text that is not a number,
  // NaN or infinity, a value that overflows or underflows float, or one below min_value.
  float get_float(const std::string& option, float fallback, float min_value) const;
};

// Splits argv; UsageError for no command, an unknown option, a missing value or a value given to
// a flag. Options may be written "--lr 0.1" or "--lr=0.1"; an argument that does not start with
// "--", and every argument after a lone "--", is positional.
CliArgs parse_cli(const std::vector<std::string>& argv);

// What `trident train` / `trident eval` read from the command line, every value checked. A
// training option that was not given takes the model's recipe (models/zoo.h) value: the
// defaults below only matter for options without one.
struct CliTrainSettings {
  std::string model = "cnn";       // not checked here: the model registry does that
  std::string optimizer = "sgd";   // checked by validate(OptimizerConfig)
  std::string data;                // "" : the default data directory
  std::string devices;             // "" : TRIDENT_DEVICES or the default device
  std::string checkpoint;          // "" : none (an explicit --checkpoint '' is an error)
  std::string schedule = "none", loss = "auto";
  std::string split = "even";      // even, speed, or shares "3,1"
  std::string precision;           // "" : TRIDENT_PRECISION or fp32 (checked)
  bool sync_given = false;         // --sync was given (else the set decides: see cli.cpp)
  int64_t epochs = 1, batch = 200, train_limit = 0, test_limit = 0, average_every = 0;
  int64_t classes = 0;             // 0: the data's (the largest label + 1 of either split)
  int64_t warmup_steps = 0, step_epochs = 1, crop_padding = 2;
  uint64_t seed = 1;
  float lr = 0.01f, momentum = 0.5f, weight_decay = 0.0f, max_lr = 0.0f, min_lr = 0.0f,
        gamma = 0.1f, label_smoothing = 0.0f, clip_grad = 0.0f;
  bool resume = false, capture = true, json = false, allow_nonfinite = false, augment = false,
       no_flip = false, nesterov = false, no_nesterov = false;
};

// Reads and checks every train/eval option of args (UsageError naming the option on any bad
// value; --checkpoint paths are checked for existence separately, by the command).
CliTrainSettings train_settings(const CliArgs& args);

// What `trident predict` reads: a weights file or checkpoint, the inputs (image files, .npy
// batches), and how to show the answers.
struct CliPredictSettings {
  std::string checkpoint;            // required
  std::string model;                 // "": the file's metadata names it
  std::string device;                // "": TRIDENT_DEVICES' first, else the default device
  std::string labels;                // "": Fashion-MNIST's names for 10 classes, else numbers
  std::string outputs;               // "": none; else a .npy of the raw outputs [N, classes]
  std::vector<std::string> inputs;   // at least one
  std::string precision;             // "": TRIDENT_PRECISION or fp32 (checked)
  int64_t top = 5, batch = 1000;
  bool json = false, resize = false, capture = true;
};
CliPredictSettings predict_settings(const CliArgs& args);

// What `trident export-weights` reads.
struct CliExportSettings {
  std::string checkpoint, output, model;  // model "": from the file's metadata
  std::string dtype = "f32";              // f32, f16 or bf16
};
CliExportSettings export_settings(const CliArgs& args);

// Commands that take no positional arguments: UsageError naming the first one.
void reject_positional(const CliArgs& args);
// A known option that args.command does not read (e.g. `trident predict --epochs 3`): a
// UsageError naming it and the command, rather than an option silently ignored.
void reject_foreign_options(const CliArgs& args);

}  // namespace trident
