// The CPU benchmark shapes (Llama-3-8B attention heads, DESIGN.md section 5 scaled to 2 cores) and
// the one place that counts their bytes and FLOPs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/rope.hpp"

namespace lazyattn::bench {

// Llama-3-8B attention: 32 query heads, 8 KV heads (GQA group 4), head dim 128, page size 16.
inline constexpr int kQoHeads = 32;
inline constexpr int kKvHeads = 8;
inline constexpr int kHeadDim = 128;
inline constexpr int kPageSize = 16;
inline constexpr int kGroup = kQoHeads / kKvHeads;

// A batch of identical-looking requests: each has its own documents (doc_lengths, stored once per
// request, nothing shared) and a private tail of tail_length tokens whose last num_queries tokens
// are the queries. shuffled: the documents take back-to-back slots in a shuffled order (RAG).
struct Shape {
  std::string name;
  int batch = 1;
  std::vector<std::int64_t> doc_lengths;
  std::int64_t tail_length = 32;
  std::int64_t num_queries = 1;
  bool shuffled = false;

  std::int64_t keys_per_request() const {
    std::int64_t n = tail_length;
    for (std::int64_t l : doc_lengths) n += l;
    return n;
  }
  std::int64_t keys() const { return batch * keys_per_request(); }
};

// Decode: batch x context keys per request, one document of context - 32 tokens and a 32-token
// tail (the query is the tail's last token).
inline Shape decode_shape(int batch, std::int64_t context) {
  return Shape{"b" + std::to_string(batch) + "x" + std::to_string(context),
               batch,
               {context - 32},
               32,
               1,
               false};
}

// RAG: 5 documents x 1024 tokens at shuffled starts, then a 32-token tail (5152 keys).
inline Shape rag_shape(int batch) {
  return Shape{
      "rag5x1024_b" + std::to_string(batch), batch, {1024, 1024, 1024, 1024, 1024}, 32, 1, true};
}

// Tail prefill: num_queries new tail tokens (the tail holds exactly them) over one document.
inline Shape prefill_shape(std::int64_t doc, std::int64_t queries) {
  return Shape{"prefill_q" + std::to_string(queries) + "_doc" + std::to_string(doc),
               1,
               {doc},
               queries,
               queries,
               false};
}

// What one attention call over a shape reads and computes.
//   kv_bytes: K and V of every key of every request, once, in the store's element type (what a
//             decode step must stream; queries and outputs are < 0.1% and not counted).
//   flops:    2 * head_dim per (query head, visible key) for q.k and again for p.v; the tail is
//             causal, so query r of n sees tail_length - n + r + 1 tail keys.
struct Work {
  std::int64_t keys = 0;
  std::int64_t kv_bytes = 0;
  double flops = 0;
};

inline Work work_of(const Shape& s, DType dtype) {
  Work w;
  w.keys = s.keys();
  w.kv_bytes = w.keys * kKvHeads * kHeadDim * 2 * size_of(dtype);
  std::int64_t docs = s.keys_per_request() - s.tail_length;
  std::int64_t visible = 0;  // (query, key) pairs of one request
  for (std::int64_t r = 0; r < s.num_queries; ++r) {
    visible += docs + s.tail_length - s.num_queries + r + 1;
  }
  w.flops = 4.0 * kHeadDim * kQoHeads * static_cast<double>(visible) * s.batch;
  return w;
}

// Llama-3.1's RoPE schedule (theta 500000, llama3 scaling x8 from 8192).
inline RopePolicy llama3_rope() {
  RopeConfig c;
  c.head_dim = kHeadDim;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 131072;
  c.rope_scaling.rope_type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return RopePolicy(c);
}

}  // namespace lazyattn::bench
