# Driver for the consumer tests: (install,) configure, build and run a consumer project.
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer ${MODE}: `${ARGN}` failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK})
set(extra "")
if(MODE STREQUAL "find_package")
  step(${CMAKE_COMMAND} --install ${PROJECT_BUILD} --prefix ${WORK}/prefix)
  set(extra -DCMAKE_PREFIX_PATH=${WORK}/prefix)
else()
  set(extra -DLAZYATTN_SOURCE_DIR=${SOURCE})
endif()
# The consumer is plain C++: keep the CUDA part out so it builds on machines without a GPU toolkit.
step(${CMAKE_COMMAND} -S ${CONSUMER} -B ${WORK}/build -G ${GENERATOR} ${extra} -DLAZYATTN_CUDA=OFF
     -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK}/build)
step(${WORK}/build/consumer)
message(STATUS "consumer ${MODE}: built and ran")
