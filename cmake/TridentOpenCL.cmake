# trident_opencl: backends/opencl/*.cpp, CLBlast, and kernels/opencl/*.cl embedded as strings.
if(TRIDENT_ENABLE_OPENCL)
  file(GLOB _opencl_sources CONFIGURE_DEPENDS backends/opencl/*.cpp)
  file(GLOB _cl_kernels CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/opencl/*.cl)
  set(_embedded ${CMAKE_CURRENT_BINARY_DIR}/generated/opencl_kernels_embedded.cpp)
  add_custom_command(OUTPUT ${_embedded}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${_embedded} "-DKERNELS=${_cl_kernels}"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedKernels.cmake
    DEPENDS ${_cl_kernels} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedKernels.cmake
    COMMENT "Embedding OpenCL kernels" VERBATIM)
  trident_add_layer(trident_opencl SOURCES ${_opencl_sources} ${_embedded} HEADER_DIRS backends/opencl)
  # PUBLIC: the backend's headers (used by its tests) need the OpenCL version they were written for.
  target_compile_definitions(trident_opencl
    PUBLIC CL_TARGET_OPENCL_VERSION=120 CL_USE_DEPRECATED_OPENCL_1_2_APIS
    PRIVATE TRIDENT_HAVE_OPENCL=1 TRIDENT_OPENCL_KERNEL_DIR="${CMAKE_CURRENT_SOURCE_DIR}/kernels/opencl")
  if(TRIDENT_OPENCL_KERNELS_FROM_DISK)
    target_compile_definitions(trident_opencl PRIVATE TRIDENT_OPENCL_KERNELS_FROM_DISK=1)
  endif()
  target_link_libraries(trident_opencl PUBLIC trident_core OpenCL::OpenCL clblast)
endif()
