# Script mode: install Trident from TRIDENT_BUILD into WORK/prefix, check the installed headers
# (public ones under include/trident/, no private backend or kernel headers), build
# CONSUMER_SOURCE against it with find_package(Trident COMPONENTS PRESENT_COMPONENTS) and run
# it (it prints EXPECTED_VERSION from <trident/version.h>); build EXAMPLES_SOURCE the same way
# and run the examples briefly; then check that asking for each of ABSENT_COMPONENTS fails
# naming it. Any failing step fails the test.
file(REMOVE_RECURSE ${WORK})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()
run_step(${CMAKE_COMMAND} --install ${TRIDENT_BUILD} --prefix ${WORK}/prefix)

set(include ${WORK}/prefix/include/trident)
foreach(public trident.h version.h core/tensor.h core/log.h core/registry.h models/trainer.h)
  if(NOT EXISTS ${include}/${public})
    message(FATAL_ERROR "installed package lacks the public header include/trident/${public}")
  endif()
endforeach()
foreach(private backends kernels)
  if(EXISTS ${include}/${private})
    message(FATAL_ERROR "installed package holds private headers: include/trident/${private}")
  endif()
endforeach()

string(REPLACE "," ";" PRESENT_COMPONENTS "${PRESENT_COMPONENTS}")
string(REPLACE "," ";" ABSENT_COMPONENTS "${ABSENT_COMPONENTS}")
run_step(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix
         -DCMAKE_BUILD_TYPE=Release "-DTRIDENT_COMPONENTS=${PRESENT_COMPONENTS}")
run_step(${CMAKE_COMMAND} --build ${WORK}/build -j 2)
run_step(${WORK}/build/consumer)
if(NOT step_output MATCHES "Trident ${EXPECTED_VERSION}")
  message(FATAL_ERROR "consumer printed no 'Trident ${EXPECTED_VERSION}':\n${step_output}")
endif()

# The examples, built the same way and run briefly (a few thousand samples, one or two epochs):
# each exits non-zero unless its model learned.
if(EXAMPLES_SOURCE)
  run_step(${CMAKE_COMMAND} -S ${EXAMPLES_SOURCE} -B ${WORK}/examples -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
  run_step(${CMAKE_COMMAND} --build ${WORK}/examples -j 2)
  if(EXISTS ${EXAMPLES_DATA})
    run_step(${CMAKE_COMMAND} -E env TRIDENT_BACKEND=cpu ${WORK}/examples/tanh_mlp ${EXAMPLES_DATA} 4000 2)
    run_step(${CMAKE_COMMAND} -E env TRIDENT_BACKEND=cpu ${WORK}/examples/bn_cnn ${EXAMPLES_DATA} 4000 2)
  else()
    message(STATUS "examples built, not run: no data set at ${EXAMPLES_DATA}")
  endif()
endif()

# A component the build lacks: find_package fails, and its message names the component.
foreach(component ${ABSENT_COMPONENTS})
  set(dir ${WORK}/absent_${component})
  file(WRITE ${dir}/CMakeLists.txt
    "cmake_minimum_required(VERSION 3.24)\nproject(AbsentComponent LANGUAGES CXX)\n"
    "find_package(Trident REQUIRED COMPONENTS ${component})\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${dir} -B ${dir}/build
                          -DCMAKE_PREFIX_PATH=${WORK}/prefix
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(Trident COMPONENTS ${component}) succeeded, but this build has no ${component}")
  endif()
  if(NOT "${out}${err}" MATCHES "${component}")
    message(FATAL_ERROR "find_package(Trident COMPONENTS ${component}) failed without naming it:\n${out}\n${err}")
  endif()
  message(STATUS "COMPONENTS ${component}: fails as it should")
endforeach()
