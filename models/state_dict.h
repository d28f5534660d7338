// A network's state dict, named and shaped exactly as PyTorch's for the same architecture:
// parameters, batch-norm running statistics and num_batches_tracked counters. The same file
// format (safetensors) moves weights between Trident and PyTorch both ways.
#pragma once
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/network.h"

namespace trident {

// Host copies of every state-dict tensor, in PyTorch's order (waits for queued work).
std::vector<HostTensor> network_state_dict(const Network& network);

// What load_network_state_dict found, as PyTorch's load_state_dict reports it.
struct StateDictReport {
  std::vector<std::string> missing;     // the network has them, the file does not
  std::vector<std::string> unexpected;  // the file has them, the network does not
  std::vector<std::string> mismatched;  // "fc.weight: file [10, 64], model [10, 128]"
  bool clean() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string describe() const;  // "missing keys: ...; unexpected keys: ..."
};

// Copies the file's tensors into the network by name. F32 as is; F16 and BF16 converted to
// float32; num_batches_tracked from any integer type. Every tensor is checked (shape, dtype,
// finite values) before anything is written. strict: missing, unexpected or mismatched keys
// are a FormatError naming `source` and listing them; otherwise matching tensors load and the
// report says what did not. `ignore_prefix`: keys starting with it are not "unexpected" (a
// training checkpoint's "optimizer." entries).
StateDictReport load_network_state_dict(Network& network, const std::vector<HostTensor>& tensors,
                                        const std::string& source, bool strict,
                                        const std::string& ignore_prefix = "");

}  // namespace trident
