// `trident predict` (images and .npy batches through a Predictor) and `trident export-weights`
// (a checkpoint's weights alone, as PyTorch loads them), and the model a file holds.
#include "trident/models/cli_predict.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "trident/core/files.h"
#include "trident/core/finite.h"
#include "trident/core/image.h"
#include "trident/core/json.h"
#include "trident/core/npy.h"
#include "trident/core/registry.h"
#include "trident/models/precision.h"
#include "trident/models/predictor.h"
#include "trident/models/state_dict.h"

namespace trident {
namespace {

std::string shown(const std::string& text) { return json::quote_for_message(text); }

// A sample shape as [C, H, W] ([H, W] -> [1, H, W], [D] -> [1, 1, D]).
Shape as_image(const Shape& s) {
  if (s.size() == 3) return s;
  if (s.size() == 2) return {1, s[0], s[1]};
  return {1, 1, s[0]};
}

// Class names: --labels FILE (one per line, as many as classes), else Fashion-MNIST's for 10
// classes, else the class numbers.
std::vector<std::string> class_names(const std::string& labels, int64_t classes) {
  std::vector<std::string> names;
  if (labels.empty()) {
    for (int64_t c = 0; c < classes; ++c)
      names.push_back(classes == 10 ? kFashionMnistClassNames[size_t(c)] : std::to_string(c));
    return names;
  }
  const InputFile input = open_regular_file(labels, "labels file");
  if (input.size() > (uint64_t{16} << 20))
    throw FormatError(labels + ": a labels file of " + std::to_string(input.size()) +
                      " bytes is too large (one class name per line)");
  std::string text(static_cast<size_t>(input.size()), '\0');
  if (!text.empty() && std::fread(&text[0], 1, text.size(), input.get()) != text.size())
    throw FormatError(labels + ": could not read the file");
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!json::valid_utf8(line))
      throw FormatError(labels + ": line " + std::to_string(names.size() + 1) +
                        " is not UTF-8 text");
    names.push_back(line);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();  // trailing blank lines
  if (int64_t(names.size()) != classes)
    throw UsageError("--labels " + labels + " has " + std::to_string(names.size()) +
                     " class names (one per line), the model has " + std::to_string(classes) +
                     " classes");
  return names;
}

// The samples of one input (an image, or a .npy batch) as the model takes them.
struct Input {
  std::string name;      // the path
  bool floats = false;   // float32 model inputs; else uint8 images
  bool batch = false;    // a .npy (its samples are shown with their row)
  int64_t count = 0;     // samples
  int64_t first = 0;     // its first sample's index in the pool of its kind
};

struct Pools {
  std::vector<uint8_t> bytes;  // uint8 samples, back to back
  std::vector<float> floats;
};

void add_npy(const std::string& path, const Shape& sample, const std::string& model,
             std::vector<Input>& inputs, Pools& pools) {
  NpyArray a = load_npy(path);
  const NpyHeader& h = a.header;
  const bool u8 = h.kind == 'u' && h.item_size == 1, f32 = h.kind == 'f' && h.item_size == 4;
  if (!u8 && !f32)
    throw FormatError(path + ": arrays of dtype '" + h.descr + "' are not supported: predict "
                      "reads uint8 images or float32 model inputs (np.asarray(a, np.float32))");
  const Shape image = as_image(sample);
  Shape per_sample(a.shape.begin() + (a.shape.empty() ? 0 : 1), a.shape.end());
  if (per_sample.size() == 2 && image[0] == 1) per_sample.insert(per_sample.begin(), 1);
  if (a.shape.size() < 2 || (per_sample != image && per_sample != sample))
    throw FormatError(path + " holds an array of shape " + shape_string(a.shape) + "; model '" +
                      model + "' takes samples of " + shape_string(sample) + ": give N x " +
                      std::to_string(image[0]) + " x " + std::to_string(image[1]) + " x " +
                      std::to_string(image[2]) +
                      (image[0] == 1 ? " or N x " + std::to_string(image[1]) + " x " +
                                           std::to_string(image[2])
                                     : std::string()) +
                      " (arrays are not resized)");
  if (a.shape[0] == 0) throw FormatError(path + " holds no samples (its first dimension is 0)");
  Input in;
  in.name = path;
  in.floats = f32;
  in.batch = true;
  in.count = a.shape[0];
  if (f32) {
    in.first = int64_t(pools.floats.size()) / shape_numel(sample);
    const size_t n = a.bytes.size() / 4, at = pools.floats.size();
    pools.floats.resize(at + n);
    std::memcpy(pools.floats.data() + at, a.bytes.data(), a.bytes.size());
    const int64_t bad = first_non_finite(pools.floats.data() + at, int64_t(n));
    if (bad >= 0)
      throw FormatError(path + ": sample " + std::to_string(bad / shape_numel(sample)) +
                        " holds a non-finite value; model inputs must be finite");
  } else {
    in.first = int64_t(pools.bytes.size()) / shape_numel(sample);
    pools.bytes.insert(pools.bytes.end(), a.bytes.begin(), a.bytes.end());
  }
  inputs.push_back(in);
}

void add_image(const std::string& path, const Shape& sample, const std::string& model,
               bool resize, std::vector<Input>& inputs, Pools& pools, std::ostream& err) {
  const Shape image_shape = as_image(sample);
  const int64_t channels = image_shape[0], height = image_shape[1], width = image_shape[2];
  if (channels != 1 && channels != 3)
    throw UsageError(path + ": model '" + model + "' takes samples of " + shape_string(sample) +
                     ", not images (give a .npy batch)");
  Image image = load_image(path);
  const std::string size = std::to_string(image.width) + "x" + std::to_string(image.height);
  std::string notes;
  if (image.channels != channels) {
    notes = image.channels == 3 ? "RGB converted to gray (ITU-R BT.601 luma)"
                                : "gray repeated into RGB";
    image = convert_channels(image, channels);
  }
  if (image.height != height || image.width != width) {
    if (!resize)
      throw UsageError(path + " is " + size + " pixels, model '" + model + "' takes " +
                       std::to_string(width) + "x" + std::to_string(height) +
                       " images: pass --resize to resize it (bilinear), or resize it yourself");
    image = resize_bilinear(image, height, width);
    notes += std::string(notes.empty() ? "" : ", ") + "resized from " + size + " to " +
             std::to_string(width) + "x" + std::to_string(height) + " (bilinear)";
  }
  if (!notes.empty()) err << "trident predict: " << path << ": " << notes << "\n";
  Input in;
  in.name = path;
  in.count = 1;
  in.first = int64_t(pools.bytes.size()) / shape_numel(sample);
  pools.bytes.insert(pools.bytes.end(), image.pixels.begin(), image.pixels.end());
  inputs.push_back(in);
}

std::string percent(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * p);
  return text;
}

}  // namespace

ModelFile read_model_file(const std::string& path, const std::string& model_option) {
  ModelFile m;
  m.path = path;
  m.file = load_safetensors(path);
  m.checkpoint = is_training_checkpoint(m.file);
  auto named = m.file.metadata.find("model");
  if (named != m.file.metadata.end() && !model_option.empty() && named->second != model_option)
    throw UsageError(path + " holds model " + shown(named->second) + " (its metadata), but "
                     "--model says " + shown(model_option));
  m.model = !model_option.empty() ? model_option
            : named != m.file.metadata.end() ? named->second
                                             : std::string();
  if (m.model.empty())
    throw UsageError(path + " does not say which model it holds (no 'model' in its metadata: "
                     "weights saved by PyTorch?); pass --model NAME (" + model_names() + ")");
  m.sample_shape = file_sample_shape(m.file, path).value_or(Shape{1, 28, 28});
  return m;
}

int64_t classes_in_file(const ModelRecipe& recipe, const ModelFile& m) {
  // A probe of the architecture on the host, to learn the name of its last parameter.
  Network probe = recipe.make(10);
  probe.build(DeviceRegistry::global().device("cpu"), m.sample_shape, 0, /*training=*/false);
  if (probe.named_parameters().empty()) return 10;
  const std::string& last = probe.named_parameters().back().name;
  for (const HostTensor& t : m.file.tensors)
    if (t.name == last && !t.shape.empty() && t.shape[0] > 0) return t.shape[0];
  return 10;
}

int cmd_predict(const CliArgs& a, std::ostream& out, std::ostream& err) {
  const CliPredictSettings s = predict_settings(a);
  if (!s.outputs.empty()) check_output_file_path(s.outputs, "--outputs");
  const ModelFile m = read_model_file(s.checkpoint, s.model);
  const ModelRecipe& recipe = find_model(m.model);
  auto& registry = DeviceRegistry::global();
  Device& device = s.device.empty() ? *registry.selected_devices().front() : registry.device(s.device);
  const int64_t classes = classes_in_file(recipe, m);
  const std::vector<std::string> names = class_names(s.labels, classes);

  // Every input is read and checked before anything runs or prints.
  std::vector<Input> inputs;
  Pools pools;
  for (const std::string& path : s.inputs) {
    const std::string kind = sniff_input_kind(path);
    if (kind == "npy")
      add_npy(path, m.sample_shape, recipe.name, inputs, pools);
    else if (kind == "png" || kind == "pgm")
      add_image(path, m.sample_shape, recipe.name, s.resize, inputs, pools, err);
    else
      throw FormatError(path + ": not a PNG image, a PGM image (P2, P5) or a NumPy .npy file");
  }

  Network net = recipe.make(classes);
  std::optional<Precision> chosen;  // --precision, else TRIDENT_PRECISION, else fp32
  if (!s.precision.empty()) chosen = parse_precision(s.precision);
  net.set_precision(resolve_precision(chosen));
  net.build(device, m.sample_shape, 0, /*training=*/false);
  load_weights(net, m.file, m.path, /*strict=*/true);
  PredictorOptions options;
  options.max_batch = s.batch;
  options.capture = s.capture;
  options.normalization = {true, {recipe.mean}, {recipe.std}};
  Predictor predictor(std::move(net), options);
  const int64_t numel = shape_numel(m.sample_shape);
  const std::vector<float> byte_outputs =
      predictor.outputs(pools.bytes.data(), int64_t(pools.bytes.size()) / numel);
  const std::vector<float> float_outputs =
      predictor.outputs(pools.floats.data(), int64_t(pools.floats.size()) / numel);

  std::vector<float> all;  // the outputs in input order
  for (const Input& in : inputs) {
    const std::vector<float>& pool = in.floats ? float_outputs : byte_outputs;
    all.insert(all.end(), pool.begin() + in.first * classes,
               pool.begin() + (in.first + in.count) * classes);
  }
  if (!s.outputs.empty()) {
    std::vector<uint8_t> bytes(all.size() * sizeof(float));
    std::memcpy(bytes.data(), all.data(), bytes.size());
    save_npy(s.outputs, "<f4", {int64_t(all.size()) / classes, classes}, bytes);
  }
  const std::vector<Prediction> top =
      Predictor::top_k(Predictor::softmax_rows(all, classes), classes, s.top);
  size_t row = 0;
  for (const Input& in : inputs)
    for (int64_t i = 0; i < in.count; ++i, ++row) {
      const Prediction& p = top[row];
      const bool batch = in.batch;
      if (s.json) {
        std::vector<std::string> labels;
        std::vector<double> probabilities;
        for (size_t k = 0; k < p.classes.size(); ++k) {
          labels.push_back(names[size_t(p.classes[k])]);
          probabilities.push_back(p.probabilities[k]);
        }
        json::ObjectWriter line;
        line.string("input", in.name);
        if (batch) line.integer("row", i);
        out << line.string("model", recipe.name)
                   .integer("class", p.top())
                   .string("label", labels.front())
                   .number("probability", p.probabilities.front())
                   .integers("top_classes", p.classes)
                   .strings("top_labels", labels)
                   .numbers("top_probabilities", probabilities)
                   .str()
            << "\n";
      } else {
        out << in.name << (batch ? "[" + std::to_string(i) + "]" : "") << ":";
        for (size_t k = 0; k < p.classes.size(); ++k)
          out << (k ? ", " : " ") << names[size_t(p.classes[k])] << " "
              << percent(p.probabilities[k]);
        out << "\n";
      }
    }
  out.flush();
  err << "trident predict: " << row << " sample" << (row == 1 ? "" : "s") << ", model "
      << recipe.name << " from " << m.path << " on " << device.info().id() << " in "
      << precision_name(predictor.network().precision()) << "\n";
  return 0;
}

int cmd_export_weights(const CliArgs& a, std::ostream& out, std::ostream&) {
  const CliExportSettings s = export_settings(a);
  check_output_file_path(s.output, "--output");
  const ModelFile m = read_model_file(s.checkpoint, s.model);
  const ModelRecipe& recipe = find_model(m.model);
  Network net = recipe.make(classes_in_file(recipe, m));
  net.build(DeviceRegistry::global().device("cpu"), m.sample_shape, 0, /*training=*/false);
  load_weights(net, m.file, m.path, /*strict=*/true);
  const DType dtype = s.dtype == "f16" ? DType::f16 : s.dtype == "bf16" ? DType::bf16 : DType::f32;
  save_weights(net, s.output, dtype);
  out << "wrote " << s.output << ": the weights of model " << recipe.name << " from "
      << m.path << " (" << net.state_entries().size() << " tensors, " << dtype_name(dtype)
      << "); PyTorch: model.load_state_dict(safetensors.torch.load_file(path), strict=True)\n";
  return 0;
}

}  // namespace trident
