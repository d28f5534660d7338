# trident_mpi: core/mpi/*.cpp, the multi-process job (compiled only with MPI). It sits above the
# registry layer: it looks devices up in DeviceRegistry::global() and, until the NCCL bootstrap
# moves behind a backend hook, calls the CUDA backend's NCCL functions.
if(TRIDENT_ENABLE_MPI)
  file(GLOB _mpi_sources CONFIGURE_DEPENDS core/mpi/*.cpp)
  trident_add_layer(trident_mpi SOURCES ${_mpi_sources})
  # PUBLIC: core/mpi/process_group.h declares the MPI functions instead of inline stand-ins.
  target_compile_definitions(trident_mpi PUBLIC TRIDENT_HAVE_MPI=1)
  target_link_libraries(trident_mpi PUBLIC trident_core MPI::MPI_C PRIVATE trident_backends)
  if(TRIDENT_ENABLE_NCCL)
    # mpi_world.cpp's TRIDENT_HAVE_CUDA guards its NCCL path only: defined where NCCL is built.
    target_compile_definitions(trident_mpi PRIVATE TRIDENT_HAVE_CUDA=1)
    target_link_libraries(trident_mpi PRIVATE trident_cuda)
  endif()
endif()
