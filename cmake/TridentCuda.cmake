# trident_cuda: backends/cuda/*.cpp and kernels/cuda/*.cu, linked with cuBLAS(Lt), and with NCCL
# when TRIDENT_ENABLE_NCCL (TRIDENT_HAVE_NCCL; without it the NCCL collective is left out).
if(TRIDENT_ENABLE_CUDA)
  enable_language(CUDA)
  # /usr/include (from OpenCL/MPI imported targets) must never reach nvcc as -isystem: it breaks
  # libstdc++'s #include_next <math.h>. It is searched anyway, so mark it implicit.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  set(CMAKE_CUDA_STANDARD 17)
  file(GLOB _cuda_sources CONFIGURE_DEPENDS backends/cuda/*.cpp backends/cuda/*.cu kernels/cuda/*.cu)
  if(NOT TRIDENT_ENABLE_NCCL)
    list(FILTER _cuda_sources EXCLUDE REGEX "backends/cuda/nccl_.*\\.cpp$")
  endif()
  trident_add_layer(trident_cuda SOURCES ${_cuda_sources} HEADER_DIRS backends/cuda kernels/cuda)
  target_compile_definitions(trident_cuda PRIVATE TRIDENT_HAVE_CUDA=1)
  target_link_libraries(trident_cuda PUBLIC trident_core CUDA::cudart CUDA::cublas CUDA::cublasLt)
  if(TRIDENT_ENABLE_NCCL)
    # PUBLIC: backends/cuda/cuda_check.h includes nccl.h when it is defined.
    target_compile_definitions(trident_cuda PUBLIC TRIDENT_HAVE_NCCL=1)
    target_link_libraries(trident_cuda PUBLIC NCCL::nccl)
  endif()
  target_compile_options(trident_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
endif()
