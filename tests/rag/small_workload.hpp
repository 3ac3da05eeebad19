// The small RAG workload the engine tests run, on the CPU (tests/rag) and the GPU
// (tests/cuda/test_rag_backend.cu): 8 documents of 40 tokens (not a multiple of the page size),
// 3 per request, Zipf 1.0.
#pragma once

#include "../../bench/rag/workload.hpp"

namespace lazyattn::rag::test {

inline WorkloadConfig small_workload(int vocab, int num_requests = 10, int output_tokens = 4) {
  WorkloadConfig c;
  c.num_documents = 8;
  c.docs_per_request = 3;
  c.doc_length = 40;
  c.question_length = 5;
  c.output_tokens = output_tokens;
  c.zipf = 1.0;
  c.num_requests = num_requests;
  c.seed = 3;
  c.vocab_size = vocab;
  return c;
}

}  // namespace lazyattn::rag::test
