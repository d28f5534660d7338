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
  # Hopper's warpgroup multiply (wgmma) exists only in sm_90a code, which runs on compute
  # capability 9.0 alone: kernels/cuda/sm90a/ builds for that one architecture, whatever
  # CMAKE_CUDA_ARCHITECTURES says, into objects of trident_cuda's; wgmma_conv_available() asks at
  # run time whether the device loaded them.
  add_library(trident_cuda_sm90a OBJECT kernels/cuda/sm90a/wgmma_conv.cu
                                       kernels/cuda/sm90a/wgmma_wgrad.cu)
  set_target_properties(trident_cuda_sm90a PROPERTIES CUDA_ARCHITECTURES 90a)
  target_include_directories(trident_cuda_sm90a PRIVATE ${TRIDENT_LAYER_ROOT}/trident_cuda)
  target_link_libraries(trident_cuda_sm90a PRIVATE trident_core CUDA::cudart)
  target_compile_options(trident_cuda_sm90a PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
  trident_warnings(trident_cuda_sm90a)
  target_sources(trident_cuda PRIVATE $<TARGET_OBJECTS:trident_cuda_sm90a>)
endif()
