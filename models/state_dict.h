// A network's state dict, named and shaped exactly as PyTorch's for the same architecture:
// parameters, batch-norm running statistics and num_batches_tracked counters. The same file
// format (safetensors) moves weights between Trident and PyTorch both ways:
//
//   save_weights(net, "w.safetensors");          // PyTorch: m.load_state_dict(load_file(p))
//   load_weights(net, "from_torch.safetensors"); // save_file(m.state_dict(), p) in PyTorch
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "trident/core/safetensors.h"
#include "trident/models/network.h"

namespace trident {

// Host copies of every state-dict tensor, in PyTorch's order (waits for queued work).
std::vector<HostTensor> network_state_dict(const Network& network);

// What load_network_state_dict found, as PyTorch's load_state_dict reports it.
struct StateDictReport {
  std::vector<std::string> missing;     // the network has them, the file does not
  std::vector<std::string> unexpected;  // the file has them, the network does not
  std::vector<std::string> mismatched;  // "fc.weight: file [10, 64] F32, model [10, 128] F32"
  std::string hint;                     // what the names suggest ("" if nothing)
  bool clean() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // "missing keys (2): 'a', 'b'; unexpected keys (1): 'c'", at most 20 names per kind, and a
  // hint when the file's names are the model's under a prefix ("module.": a DDP state dict).
  std::string describe() const;
};

// Copies the file's tensors into the network by name. F32 as is; F16 and BF16 converted to
// float32; num_batches_tracked from any integer type. Every tensor is checked (shape, dtype,
// finite values, running_var >= 0) before anything is written. strict: missing, unexpected or
// mismatched keys are a FormatError naming `source` and listing them; otherwise matching
// tensors load and the report says what did not (a shape or dtype mismatch is an error either
// way, as in PyTorch). A missing num_batches_tracked is accepted in both modes, as PyTorch
// accepts it from a state dict without version metadata (a safetensors file). `ignore_prefix`:
// keys starting with it are not "unexpected" (a training checkpoint's "optimizer." entries).
StateDictReport load_network_state_dict(Network& network, const std::vector<HostTensor>& tensors,
                                        const std::string& source, bool strict,
                                        const std::string& ignore_prefix = "");

// The file's tensors converted to dtype (F32, F16 or BF16; rounded to nearest even); integer
// tensors unchanged. UsageError for another dtype, ShapeError naming the tensor for a value
// F16 cannot hold (|x| > 65504: use BF16 or F32) or one that is not finite.
std::vector<HostTensor> convert_floats(std::vector<HostTensor> tensors, DType dtype);

// Writes the network's state dict as a weights-only safetensors file that PyTorch loads with
// load_state_dict(safetensors.torch.load_file(path), strict=True) into the same architecture:
// parameters and batch-norm buffers in `dtype` (F32, F16 or BF16), num_batches_tracked as I64;
// metadata {"format": "pt", "model": NAME, "sample_shape": "[1, 28, 28]"}. Atomic (temporary
// file, fsync, rename), as checkpoints are; non-finite weights are refused (ShapeError naming
// the tensor and the element) and nothing is written.
void save_weights(const Network& network, const std::string& path, DType dtype = DType::f32);

// Reads a safetensors state dict (written by save_weights, by PyTorch's
// safetensors.torch.save_file(model.state_dict(), path), or a Trident training checkpoint,
// whose "optimizer." entries are skipped) into a built network; see load_network_state_dict.
StateDictReport load_weights(Network& network, const std::string& path, bool strict = true);
// The same from a file already read (`source` names it in messages).
StateDictReport load_weights(Network& network, const TensorFile& file, const std::string& source,
                             bool strict = true);

// The file's metadata "sample_shape" ("[1, 28, 28]": checkpoints and save_weights' files carry
// it), or nullopt without one; FormatError naming `path` when it is not such a shape.
std::optional<Shape> file_sample_shape(const TensorFile& file, const std::string& path);

// True when the file's metadata marks a Trident training checkpoint (weights plus optimizer
// state, counters and settings), false for a weights-only file.
bool is_training_checkpoint(const TensorFile& file);

}  // namespace trident
