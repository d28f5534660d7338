// The one place that lists the compiled-in backends (explicit registration: static initializers
// would be dropped when libtrident.a is linked). A new backend adds one line here.
#include "trident/core/registry.h"

namespace trident {

std::unique_ptr<Backend> make_cpu_backend();
#ifdef TRIDENT_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend();
void register_nccl_collective();  // backends/cuda/nccl_collective.h: NCCL for CUDA device sets
#endif
#ifdef TRIDENT_HAVE_OPENCL
std::unique_ptr<Backend> make_opencl_backend();
#endif

void register_builtin_backends(DeviceRegistry& registry) {
#ifdef TRIDENT_HAVE_CUDA
  register_nccl_collective();
  registry.add_backend(make_cuda_backend());
#endif
#ifdef TRIDENT_HAVE_OPENCL
  registry.add_backend(make_opencl_backend());
#endif
  registry.add_backend(make_cpu_backend());
}

}  // namespace trident
