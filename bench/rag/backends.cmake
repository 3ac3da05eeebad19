# The RAG harness's backends behind backends.hpp:
#  - lazyattn_rag_backends_cpu: the CPU backend and its weights (backends_cpu.cpp);
#  - lazyattn_rag_backends: that and the CUDA backend (cuda_backend.cu), for
#    lazyattn_rag_bench_cuda.
# The [cuda][rag] test does not link the second: the kernel tests' unity translation unit
# (tests/CMakeLists.txt) compiles cuda_backend.cu itself, so the attention kernels it instantiates
# are compiled once for the test binary, not twice (the CUDA backend's own translation unit took
# 181 s of nvcc in CI, most of it those kernels). Needs CUDA and Eigen (the CPU backend).
if(TARGET lazyattn_rag_backends_cpu OR NOT LAZYATTN_HAS_CUDA OR NOT LAZYATTN_HAS_EIGEN)
  return()
endif()
add_library(lazyattn_rag_backends_cpu STATIC ${CMAKE_CURRENT_LIST_DIR}/backends_cpu.cpp)
target_include_directories(lazyattn_rag_backends_cpu PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(lazyattn_rag_backends_cpu PUBLIC lazyattn::reference)
target_compile_options(lazyattn_rag_backends_cpu PRIVATE -Wall -Wextra)
if(LAZYATTN_BUILD_CUDA_BENCHMARKS)
  add_library(lazyattn_rag_backends STATIC ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cu)
  target_link_libraries(lazyattn_rag_backends PUBLIC lazyattn_rag_backends_cpu
                        PRIVATE lazyattn::cuda CUDA::cublas)
  target_compile_options(lazyattn_rag_backends PRIVATE -lineinfo)
endif()
