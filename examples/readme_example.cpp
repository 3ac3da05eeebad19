// The README's example: RoPE from a config.json, one document stored once and placed at two
// positions of one request, one decode step on the CPU reference.
#include <cmath>
#include <cstdio>
#include <lazyattn/lazyattn.hpp>
#include <lazyattn/ref/eigen.hpp>
#include <span>
#include <vector>

int main() {
  using namespace lazyattn;

  // RoPE as the model defines it. load_rope_config("config.json") reads the file instead.
  RopePolicy rope = rope_policy_from_json(R"({
    "head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");

  // The paged store: 1 layer, 2 KV heads of dim 128, 16 tokens a page, 64 pages.
  KvStore store({.num_layers = 1,
                 .num_kv_heads = 2,
                 .head_dim = 128,
                 .page_size = 16,
                 .dtype = DType::kFloat32,
                 .num_pages = 64});

  // A 100-token document: K and V are [num_layers, length, num_kv_heads, head_dim] from your
  // model; K rotated at the document's own positions 0..99 ("local" form).
  const std::int64_t length = 100;
  std::vector<std::int32_t> tokens(length);
  std::vector<float> k(length * 2 * 128), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.01f * i);
    v[i] = std::cos(0.03f * i);
  }
  for (std::int64_t i = 0; i < length; ++i) {
    tokens[i] = static_cast<std::int32_t>(1000 + i);
    for (int h = 0; h < 2; ++h) {
      rope::rotate(rope.base_frequencies(), i, std::span<float>(&k[(i * 2 + h) * 128], 128));
    }
  }
  DocKey key = DocKey::from_tokens(tokens);
  DocHandle doc = store.insert(key, StorageForm::kLocal, length, k, v, /*pin=*/true).handle;

  // The request's own tokens (its tail): one here, whose query we compute.
  TailHandle tail = store.create_tail(StorageForm::kLocal);
  store.append(tail, 1, std::vector<float>(2 * 128, 0.1f), std::vector<float>(2 * 128, 0.2f));

  // The same stored document at positions 0 and 5000, then the tail at 5100.
  std::vector<DocHandle> docs{doc, doc};
  std::vector<std::int64_t> starts{0, 5000};
  RequestLayout layout = layouts::gapped(store, docs, starts, tail, /*tail_start=*/5100);
  Plan plan = make_plan(store, layout);

  // One decode step: q [1, 8 heads, 128] -> out [1, 8, 128], lse [1, 8].
  AttentionParams params{.num_qo_heads = 8, .num_kv_heads = 2, .head_dim = 128};
  std::vector<float> q(8 * 128, 0.5f), out(q.size()), lse(8);
  ref::eigen::decode(store, plan, /*layer=*/0, rope, params, q, out, lse);

  std::printf("keys %lld over %zu pages, query at %lld: out[0] %.6f, lse[0] %.6f\n",
              static_cast<long long>(plan.request_kv_length[0]), plan.page_ids.size(),
              static_cast<long long>(plan.request_query_position[0]), out[0], lse[0]);
  store.release(tail);
  store.unpin(doc);
}
