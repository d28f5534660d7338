// The weights side of the `trident` CLI: `predict`, `export-weights`, and how `eval` and both of
// them find the model a weights file or checkpoint holds (private to models/cli*.cpp).
#pragma once
#include <ostream>
#include <string>

#include "trident/core/safetensors.h"
#include "trident/core/tensor.h"
#include "trident/models/cli_options.h"
#include "trident/models/zoo.h"

namespace trident {

// A checkpoint or weights file read once, with the model it holds.
struct ModelFile {
  std::string path;
  TensorFile file;
  std::string model;         // from --model, else the metadata's "model"
  bool checkpoint = false;   // a training checkpoint (optimizer state, counters)
  Shape sample_shape;        // the metadata's "sample_shape", else 1x28x28 (the built-in models')
};

// Reads path; UsageError when neither --model (model_option) nor the metadata names the model,
// or when they name different models; FormatError for a malformed sample_shape.
ModelFile read_model_file(const std::string& path, const std::string& model_option);

// The class count of the file's weights for this recipe (the first dimension of the tensor of
// the model's last parameter, e.g. "fc2.bias"); 10 when the file lacks that tensor (loading
// then reports what is missing).
int64_t classes_in_file(const ModelRecipe& recipe, const ModelFile& model_file);

int cmd_predict(const CliArgs& args, std::ostream& out, std::ostream& err);
int cmd_export_weights(const CliArgs& args, std::ostream& out, std::ostream& err);

}  // namespace trident
