// Factories for the RAG backends, host-only and free of Eigen and CUDA headers: the CUDA backend's
// options and its extra calls (DeviceBackend), the CPU backend's weights as flat arrays, and
// make_cpu_backend / make_cuda_backend. They live in the lazyattn_rag_backends library
// (backends.cmake), so that main.cpp and the [cuda][rag] test compile neither Eigen under nvcc
// nor the attention kernels a second time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "model_config.hpp"

namespace lazyattn::rag {

// A model's weights as row-major float arrays, laid out as cpu_backend.hpp's ModelWeights:
// linear layers [out, in]; wqkv is q, then k, then v rows; w_gate_up is gate, then up rows.
struct HostWeights {
  struct Layer {
    std::vector<float> attn_norm;  // [hidden]
    std::vector<float> wqkv;       // [q_width + 2 kv_width, hidden]
    std::vector<float> wo;         // [hidden, q_width]
    std::vector<float> mlp_norm;   // [hidden]
    std::vector<float> w_gate_up;  // [2 intermediate, hidden]
    std::vector<float> w_down;     // [hidden, intermediate]
  };
  std::vector<float> embedding;  // [vocab, hidden]
  std::vector<Layer> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [vocab, hidden]; empty when tied to the embedding
};

// The CPU backend's weights for (config, seed), bit for bit (ModelWeights::random, flattened).
HostWeights cpu_backend_weights(const ModelConfig& config, std::uint64_t seed);

// The CPU backend (cpu_backend.hpp) behind the interface; kv_dtype float32, bfloat16 or
// float8_e4m3 (its store holds the fp8 scales: KvStore::k_scale, v_scale).
std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, std::int64_t num_pages,
                                          int page_size, std::uint64_t seed,
                                          DType kv_dtype = DType::kFloat32);

struct CudaBackendOptions {
  int page_size = 16;
  std::uint64_t weight_seed = 7;
  // Non-null: these weights (e.g. cpu_backend_weights) are rounded to bf16 and uploaded, so the
  // backend computes the CPU backend's model. Null: random weights generated on the device from
  // weight_seed, scaled as the CPU backend's (not the same values).
  const HostWeights* host_weights = nullptr;
  // Fraction of the GPU's total memory this process may hold (weights, workspaces, KV pages), as
  // vLLM's --gpu-memory-utilization: KV pages get what is left of it after weights and workspaces.
  double gpu_memory_utilization = 0.9;
  // > 0: the device pool holds exactly this many pages (it must fit the fraction above);
  // 0: every page that fits.
  std::int64_t max_pages = 0;
  std::int64_t max_step_tokens = 16384;  // activation buffers are sized for this many rows
  int max_batch = 16;                    // LM head rows sized for this many requests
  // Steps whose every item is a one-token extend run cuda::decode; false: cuda::prefill for all.
  bool decode_kernel = true;
  int device = 0;
  // The bookkeeping store's eviction order (the engine's kLfu keeps LRU underneath its own
  // choices: store_policy).
  EvictionPolicy eviction = EvictionPolicy::kLru;
  // The device pool's element type: bfloat16, or float8_e4m3 (scales per layer and KV head,
  // calibrated before the pool is sized, as the CPU backend's: fp8_calibration.hpp).
  DType kv_dtype = DType::kBFloat16;
};

// A backend whose K/V live on a device: the host KvStore is bookkeeping only (its page ids index
// the device pool; its own pool is shrunk to one two-wide head per page), so its page_bytes() is
// not the device's: use page_bytes() here for memory figures.
class DeviceBackend : public Backend {
 public:
  // A fresh, empty host store of num_pages <= max_pages() pages; the device pool and weights stay.
  // Call before each run: the engine expects an empty store.
  virtual void reset_store(std::int64_t num_pages) = 0;
  virtual std::int64_t max_pages() const = 0;   // pages of the device pool
  virtual std::int64_t page_bytes() const = 0;  // device bytes of one page: K and V, all layers
  // One document encoding, block-attention copy, prefill and decode of these sizes on a scratch
  // store, so that the first measured step does not pay for module loading and workspace growth.
  // Leaves an empty store of max_pages() pages.
  virtual void warm_up(std::int64_t doc_length, std::int64_t question_length) = 0;
  // Device, memory split (weights, workspaces, KV pool) and budget, one line each.
  virtual std::string describe() const = 0;
  virtual DType kv_dtype() const = 0;  // the device pool's element type
  // fp8 pools: K/V values page writes and copies stored as +-448 so far (0 for bf16 pools), and
  // the calibrated scales of K (k) or V, [num_layers][num_kv_heads] (empty for bf16 pools).
  virtual std::int64_t fp8_saturated() const = 0;
  virtual std::vector<float> fp8_scales(bool k) const = 0;
};

// Builds the CUDA backend (cuda_backend.cuh); throws lazyattn::Error naming the value for a model
// the CUDA kernels cannot run (head dims 64, 128, 256; GQA groups dividing 128, at most 16; a
// RoPE schedule independent of the request length) before touching the GPU.
std::unique_ptr<DeviceBackend> make_cuda_backend(const ModelConfig& config,
                                                 const CudaBackendOptions& options);

}  // namespace lazyattn::rag
