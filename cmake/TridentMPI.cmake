# trident_mpi: core/mpi/*.cpp, the multi-process job (compiled only with MPI). It needs core
# alone: the cross-process collective of a device set (NCCL for CUDA) is reached through the
# process-collective hook that a backend registers (core/collective.h), never by name.
if(TRIDENT_ENABLE_MPI)
  file(GLOB _mpi_sources CONFIGURE_DEPENDS core/mpi/*.cpp)
  trident_add_layer(trident_mpi SOURCES ${_mpi_sources})
  # PUBLIC: core/mpi/process_group.h declares the MPI functions instead of inline stand-ins.
  target_compile_definitions(trident_mpi PUBLIC TRIDENT_HAVE_MPI=1)
  target_link_libraries(trident_mpi PUBLIC trident_core MPI::MPI_C)
endif()
