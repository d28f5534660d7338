# The CUDA backend: backends/cuda/*.cpp and kernels/cuda/*.cu, linked with cuBLAS(Lt) and NCCL.
if(TRIDENT_ENABLE_CUDA)
  enable_language(CUDA)
  # /usr/include (from OpenCL/MPI imported targets) must never reach nvcc as -isystem: it breaks
  # libstdc++'s #include_next <math.h>. It is searched anyway, so mark it implicit.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  set(CMAKE_CUDA_STANDARD 17)
  file(GLOB _cuda_sources CONFIGURE_DEPENDS backends/cuda/*.cpp backends/cuda/*.cu kernels/cuda/*.cu)
  target_sources(trident PRIVATE ${_cuda_sources})
  target_compile_definitions(trident PRIVATE TRIDENT_HAVE_CUDA=1)
  target_link_libraries(trident PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt NCCL::nccl)
  target_compile_options(trident PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
endif()
