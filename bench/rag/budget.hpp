// The KV page budget in documents: C cached documents beside one running request's working set
// (its D documents and its tail: question and output), so that C is the capacity the analytic
// hit ratios speak of. LRU caches in the working set's pages too; see docs/reproduction.md.
#pragma once

#include <algorithm>
#include <cstdint>

#include "workload.hpp"

namespace lazyattn::rag {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline std::int64_t tail_pages(const WorkloadConfig& w, int page_size) {
  return ceil_div(w.question_length + w.output_tokens, page_size);
}

inline std::int64_t kv_pages_for_cache(const WorkloadConfig& w, int page_size,
                                       std::int64_t cache_docs) {
  return (cache_docs + w.docs_per_request) * ceil_div(w.doc_length, page_size) +
         tail_pages(w, page_size);
}

inline std::int64_t cache_docs_for_pages(const WorkloadConfig& w, int page_size,
                                         std::int64_t pages) {
  return std::max<std::int64_t>(
      0,
      (pages - tail_pages(w, page_size)) / ceil_div(w.doc_length, page_size) - w.docs_per_request);
}

}  // namespace lazyattn::rag
