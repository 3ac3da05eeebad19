// The CPU side of backends.hpp: the CPU backend and its weights, compiled by the host compiler
// (Eigen) into lazyattn_rag_backends.
#include <memory>

#include "backends.hpp"
#include "cpu_backend.hpp"

namespace lazyattn::rag {
namespace {

std::vector<float> flat(const Matrix& m) { return {m.data(), m.data() + m.size()}; }
std::vector<float> flat(const RowVector& v) { return {v.data(), v.data() + v.size()}; }

}  // namespace

HostWeights cpu_backend_weights(const ModelConfig& config, std::uint64_t seed) {
  const ModelWeights w = ModelWeights::random(config, seed);
  HostWeights h;
  h.embedding = flat(w.embedding);  // RowMajor: data() is [rows, cols]
  for (const LayerWeights& l : w.layers) {
    h.layers.push_back(HostWeights::Layer{flat(l.attn_norm), flat(l.wqkv), flat(l.wo),
                                          flat(l.mlp_norm), flat(l.w_gate_up), flat(l.w_down)});
  }
  h.final_norm = flat(w.final_norm);
  h.lm_head = flat(w.lm_head);
  return h;
}

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, std::int64_t num_pages,
                                          int page_size, std::uint64_t seed, DType kv_dtype) {
  return std::make_unique<CpuBackend>(config, num_pages, page_size, seed, EvictionPolicy::kLru,
                                      kv_dtype);
}

}  // namespace lazyattn::rag
