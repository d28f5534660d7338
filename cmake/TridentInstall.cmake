# `cmake --install` exports a package: find_package(Trident [COMPONENTS cuda opencl mpi nccl])
# + target_link_libraries(app Trident::trident). Installed headers are the public ones only, under
# include/trident/ exactly as the library includes them (<trident/core/tensor.h>,
# <trident/models/trainer.h>, <trident/trident.h>, <trident/version.h>); the backends' and
# kernels' headers are private and stay out.
include(CMakePackageConfigHelpers)

set(_layers trident_core trident_cpu trident_backends trident_models trident)
foreach(_layer trident_cuda trident_opencl trident_mpi)
  if(TARGET ${_layer})
    list(APPEND _layers ${_layer})
  endif()
endforeach()
install(TARGETS ${_layers} EXPORT TridentTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS trident_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY core models DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/trident
        FILES_MATCHING PATTERN "*.h")
install(FILES trident.h ${TRIDENT_LAYER_ROOT}/trident_core/trident/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/trident)
install(EXPORT TridentTargets NAMESPACE Trident:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Trident)

set(TRIDENT_CONFIG_CUDA ${TRIDENT_ENABLE_CUDA})
set(TRIDENT_CONFIG_NCCL ${TRIDENT_ENABLE_NCCL})
set(TRIDENT_CONFIG_OPENCL ${TRIDENT_ENABLE_OPENCL})
set(TRIDENT_CONFIG_MPI ${TRIDENT_ENABLE_MPI})
set(TRIDENT_CONFIG_PNG OFF)
if(PNG_FOUND)
  set(TRIDENT_CONFIG_PNG ON)
endif()
configure_package_config_file(cmake/TridentConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/TridentConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Trident)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/TridentConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/TridentConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/TridentConfigVersion.cmake
              cmake/FindNCCL.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Trident)
