// The device side of the RAG engine, behind a small interface: one forward step over a batch,
// K/V page copies with re-rotation, and the host KvStore whose page tables both sides share.
//
// The cut is at the step, not at single GEMMs: a GPU backend keeps activations on the device and
// launches a whole step (cuBLAS GEMMs, lazyattn::cuda::prefill/decode over the uploaded plan,
// cuda::write_tokens for K/V), and a finer interface would force a host round trip per operation.
// The scheduler only does bookkeeping on the store (find, allocate, pin, reserve, release) and
// never touches K/V itself.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/store.hpp"
#include "model_config.hpp"

namespace lazyattn::rag {

// A document encoded standalone: causal, at positions 0..len-1. Its pages (allocated by the
// scheduler) receive V and K rotated at rotate_by + i: 0 is local form; a position-aware cache
// stores keys at their absolute positions.
struct EncodeItem {
  DocHandle doc;
  std::span<const std::int32_t> tokens;
  std::int64_t rotate_by = 0;
};

// New tokens of a request: written to its tail (K in local form, at tail positions first + i)
// and attending through the step's plan, where this request's queries are exactly these tokens.
struct ExtendItem {
  TailHandle tail;
  std::int64_t first = 0;  // tail index of the first new token (KvStore::reserve returned it)
  std::span<const std::int32_t> tokens;
};

struct StepBatch {
  std::vector<EncodeItem> encodes;
  std::vector<ExtendItem> extends;  // request b of the plan is extends[b]
  const Plan* plan = nullptr;       // null when there are no extends
};

struct StepOutput {
  std::vector<std::int32_t> next_tokens;  // [extends]: greedy argmax after each one's last token
  std::vector<float> logits;              // [extends, vocab_size] when asked for
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& model() const = 0;
  virtual KvStore& store() = 0;
  // One step of the model over every item: all layers, K/V written to the items' pages.
  virtual void forward(const StepBatch& batch, StepOutput& out, bool want_logits) = 0;
  // Copies `length` tokens of K and V, every layer and KV head, from token src_first of the pages
  // `src` to token 0 of the pages `dst`, with K rotated by `delta` positions on the way.
  virtual void copy_rotated(std::span<const std::int32_t> src, std::int64_t src_first,
                            std::span<const std::int32_t> dst, std::int64_t length,
                            std::int64_t delta) = 0;
};

}  // namespace lazyattn::rag
