# lazyattn_rag_backends: the RAG harness's backends behind backends.hpp (the CPU one and its
# weights, the CUDA one), compiled once for lazyattn_rag_bench_cuda and the [cuda][rag] test.
# Needs CUDA and Eigen (the CPU backend).
if(TARGET lazyattn_rag_backends OR NOT LAZYATTN_HAS_CUDA OR NOT LAZYATTN_HAS_EIGEN)
  return()
endif()
add_library(lazyattn_rag_backends STATIC
  ${CMAKE_CURRENT_LIST_DIR}/backends_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cu)
target_include_directories(lazyattn_rag_backends PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(lazyattn_rag_backends PUBLIC lazyattn::reference
                      PRIVATE lazyattn::cuda CUDA::cublas)
target_compile_options(lazyattn_rag_backends PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra> $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
