# Script mode: install Trident from TRIDENT_BUILD into WORK/prefix, build CONSUMER_SOURCE (and
# EXAMPLES_SOURCE) against it with find_package(Trident), and run the results; any failing step
# fails the test.
file(REMOVE_RECURSE ${WORK})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run_step(${CMAKE_COMMAND} --install ${TRIDENT_BUILD} --prefix ${WORK}/prefix)
run_step(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build ${WORK}/build -j 2)
run_step(${WORK}/build/consumer)
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
