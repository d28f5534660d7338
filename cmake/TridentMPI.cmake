# MPI: one process per device across machines (core/mpi/*.cpp are compiled only with it).
file(GLOB _mpi_sources CONFIGURE_DEPENDS core/mpi/*.cpp)
if(TRIDENT_ENABLE_MPI)
  target_sources(trident PRIVATE ${_mpi_sources})
  target_compile_definitions(trident PUBLIC TRIDENT_HAVE_MPI=1)
  target_link_libraries(trident PUBLIC MPI::MPI_C)
endif()
