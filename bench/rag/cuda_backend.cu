// The one translation unit that compiles the CUDA backend (its kernels, cuBLAS calls and the
// attention kernels it instantiates), behind backends.hpp's make_cuda_backend.
#include <memory>

#include "backends.hpp"
#include "cuda_backend.cuh"

namespace lazyattn::rag {

std::unique_ptr<DeviceBackend> make_cuda_backend(const ModelConfig& config,
                                                 const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(config, options);
}

}  // namespace lazyattn::rag
