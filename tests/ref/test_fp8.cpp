// fp8 (e4m3) pools on the host: the store quantizes x / scale per layer and KV head, refuses what
// e4m3 cannot hold (store unchanged), and both references read code x scale, so that attention
// over an fp8 store is exactly attention over a float store holding those values, in every
// storage form, layout and rotary layout.
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

KvStoreConfig fp8_config(int layers, int heads, int head_dim) {
  KvStoreConfig c;
  c.num_layers = layers;
  c.num_kv_heads = heads;
  c.head_dim = head_dim;
  c.page_size = 4;
  c.dtype = DType::kFloat8E4M3;
  c.num_pages = 16;
  c.k_scale = fp8_scales(true, layers, heads);
  c.v_scale = fp8_scales(false, layers, heads);
  return c;
}

// The message of what f throws (empty if nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("an fp8 store holds e4m3(x / scale) of its layer and KV head", "[fp8]") {
  const int L = 2, H = 3, D = 8;
  const std::int64_t n = 6;  // two pages of 4 and a part
  KvStore store(fp8_config(L, H, D));
  CHECK(size_of(DType::kFloat8E4M3) == 1);
  CHECK(store.geometry().elements() == 2 * 16 * 3 * 4 * 8);
  Rng rng(41);
  const std::size_t count = static_cast<std::size_t>(L * n * H * D);
  std::vector<float> k = random_normal(count, rng), v = random_normal(count, rng);
  k[5] = 0.0f;  // zero and a tiny value (a subnormal code, or zero) come through too
  v[7] = 1e-6f;
  const InsertResult r = store.insert(DocKey::from_tokens(std::vector<std::int32_t>{1}),
                                      StorageForm::kLocal, n, k, v);
  REQUIRE(r.inserted);
  const std::vector<std::int32_t> pages = store.info(r.handle).pages;
  const float8_e4m3* kp = store.k_pool<float8_e4m3>();
  const float8_e4m3* vp = store.v_pool<float8_e4m3>();
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      CHECK(store.k_scale(l, h) == fp8_scale(true, l, h, H));
      CHECK(store.v_scale(l, h) == fp8_scale(false, l, h, H));
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t at = store.geometry().offset(l, pages[static_cast<std::size_t>(i / 4)],
                                                        h, static_cast<int>(i % 4));
        const std::size_t src = static_cast<std::size_t>(((l * n + i) * H + h) * D);
        for (int d = 0; d < D; ++d) {
          INFO("layer " << l << " head " << h << " token " << i << " dim " << d);
          CHECK(kp[at + d].bits ==
                from_float<float8_e4m3>(k[src + d] / store.k_scale(l, h)).bits);
          CHECK(vp[at + d].bits ==
                from_float<float8_e4m3>(v[src + d] / store.v_scale(l, h)).bits);
        }
      }
    }
  }
  // bf16 input too: converted to float, then quantized.
  std::vector<bfloat16> kb(count), vb(count);
  for (std::size_t i = 0; i < count; ++i) kb[i] = from_float<bfloat16>(k[i]);
  for (std::size_t i = 0; i < count; ++i) vb[i] = from_float<bfloat16>(v[i]);
  const InsertResult rb = store.insert(DocKey::from_tokens(std::vector<std::int32_t>{2}),
                                       StorageForm::kRaw, n, kb, vb);
  const std::int64_t at = store.geometry().offset(1, store.info(rb.handle).pages[1], 2, 1);
  const std::size_t src = static_cast<std::size_t>(((1 * n + 5) * H + 2) * D);
  CHECK(kp[at + 3].bits == from_float<float8_e4m3>(to_float(kb[src + 3]) / store.k_scale(1, 2)).bits);
  // Other stores' scales are 1.
  KvStoreConfig bf = fp8_config(L, H, D);
  bf.dtype = DType::kBFloat16;
  bf.k_scale.clear();
  bf.v_scale.clear();
  CHECK(KvStore(bf).k_scale(1, 2) == 1.0f);
  // Without scales an fp8 store takes 1.
  KvStoreConfig unit = fp8_config(L, H, D);
  unit.k_scale.clear();
  unit.v_scale.clear();
  CHECK(KvStore(unit).v_scale(0, 1) == 1.0f);
}

TEST_CASE("an fp8 store's scales are checked, named where wrong", "[fp8]") {
  auto bad = [](KvStoreConfig c, const std::string& needle) {
    const std::string msg = error_of([&] { KvStore s(c); });
    INFO(msg);
    CHECK(msg.find(needle) != std::string::npos);
  };
  KvStoreConfig c = fp8_config(2, 3, 8);
  c.k_scale.pop_back();
  bad(c, "k_scale has 5 entries, expected none (all 1) or num_layers 2 x num_kv_heads 3 = 6");
  c = fp8_config(2, 3, 8);
  c.v_scale[4] = 0.0f;
  bad(c, "v_scale[4] (layer 1, KV head 1) is 0, expected a finite positive scale");
  c = fp8_config(2, 3, 8);
  c.k_scale[0] = std::numeric_limits<float>::quiet_NaN();
  bad(c, "k_scale[0] (layer 0, KV head 0) is nan");
  c = fp8_config(2, 3, 8);
  c.v_scale[2] = -1.0f;
  bad(c, "v_scale[2] (layer 0, KV head 2) is -1");
  c = fp8_config(2, 3, 8);
  c.k_scale[1] = std::numeric_limits<float>::infinity();
  bad(c, "k_scale[1] (layer 0, KV head 1) is inf");
  c = fp8_config(2, 3, 8);
  c.dtype = DType::kBFloat16;
  bad(c, "k_scale has 6 entries for a bfloat16 pool, expected none");
  c.k_scale.clear();
  bad(c, "v_scale has 6 entries for a bfloat16 pool, expected none");
  c = fp8_config(2, 3, 8);
  c.dtype = static_cast<DType>(9);
  c.k_scale.clear();
  c.v_scale.clear();
  bad(c, "dtype 9, expected float32, float16, bfloat16 or float8_e4m3");
  // The pool's element type.
  KvStore s(fp8_config(1, 1, 2));
  CHECK(error_of([&] { (void)s.k_pool<bfloat16>(); })
            .find("KvStore::k_pool: element type bfloat16, expected the store's float8_e4m3") !=
        std::string::npos);
  CHECK(error_of([&] { (void)s.k_scale(1, 0); })
            .find("KvStore::k_scale / v_scale: layer 1, KV head 0, expected layer in [0, 1)") !=
        std::string::npos);
  CHECK(error_of([&] { (void)s.v_scale(0, -1); }).find("KV head -1") != std::string::npos);
  CHECK(error_of([&] { dispatch_dtype(DType::kFloat8E4M3, [](auto) {}); })
            .find("float8_e4m3: a host pool's element type only") != std::string::npos);
}

TEST_CASE("an fp8 store refuses values e4m3 cannot hold, and stays as it was", "[fp8]") {
  const int L = 2, H = 2, D = 4;
  KvStore store(fp8_config(L, H, D));
  const std::int64_t n = 3;
  const std::size_t count = static_cast<std::size_t>(L * n * H * D);
  std::vector<float> k(count, 0.5f), v(count, -0.25f);
  const InsertResult ok = store.insert(DocKey::from_tokens(std::vector<std::int32_t>{7}),
                                       StorageForm::kLocal, n, k, v);
  REQUIRE(ok.inserted);
  const KvStoreStats before = store.stats();
  // k at [layer 1, token 2, KV head 0, dim 3] over k_scale(1, 0): past what rounds to 448.
  const float scale = store.k_scale(1, 0);
  const std::size_t at = static_cast<std::size_t>(((1 * n + 2) * H + 0) * D + 3);
  std::vector<float> k_big = k;
  k_big[at] = 464.0f * scale * 1.001f;
  const DocKey key = DocKey::from_tokens(std::vector<std::int32_t>{8});
  std::string msg = error_of([&] { store.insert(key, StorageForm::kRaw, n, k_big, v); });
  INFO(msg);
  CHECK(msg.find("KvStore::insert: k[layer 1, token 2, KV head 0, dim 3]") != std::string::npos);
  CHECK(msg.find("expected a finite value of magnitude below 464") != std::string::npos);
  // 463 x scale rounds to 448, and fits.
  std::vector<float> k_edge = k;
  k_edge[at] = 463.0f * scale;
  InsertResult edge;
  CHECK(error_of([&] { edge = store.insert(key, StorageForm::kRaw, n, k_edge, v); }).empty());
  store.erase(edge.handle);
  // Not finite values, in v.
  std::vector<float> v_nan = v;
  v_nan[1] = std::numeric_limits<float>::quiet_NaN();
  msg = error_of([&] { store.insert(key, StorageForm::kRaw, n, k, v_nan); });
  CHECK(msg.find("KvStore::insert: v[layer 0, token 0, KV head 0, dim 1] = nan") !=
        std::string::npos);
  std::vector<float> v_inf = v;
  v_inf[count - 1] = -std::numeric_limits<float>::infinity();
  msg = error_of([&] { store.insert(key, StorageForm::kRaw, n, k, v_inf); });
  CHECK(msg.find("v[layer 1, token 2, KV head 1, dim 3] = -inf") != std::string::npos);
  // A tail's append likewise.
  TailHandle t = store.create_tail(StorageForm::kLocal);
  msg = error_of([&] { store.append(t, n, k_big, v); });
  CHECK(msg.find("KvStore::append: k[layer 1, token 2, KV head 0, dim 3]") != std::string::npos);
  CHECK(store.info(t).length == 0);
  // Nothing changed: no document, no pages, no eviction.
  const KvStoreStats after = store.stats();
  CHECK(after.pages_in_use == before.pages_in_use);
  CHECK(after.documents == before.documents);
  CHECK(after.evictions == before.evictions);
  CHECK(after.inserts == before.inserts + 1);  // the one at 463 x scale, erased since
  CHECK(!store.find(key, StorageForm::kRaw).has_value());
}

TEST_CASE("attention over an fp8 store is attention over the values it holds", "[fp8]") {
  // Each spec twice: an fp8 store, and a float store given the same values rounded through fp8
  // at the same scales. Both references, both methods: the same outputs, bit for bit.
  int i = 0;
  for (StorageForm doc : {StorageForm::kRaw, StorageForm::kLocal}) {
    for (StorageForm tail : {StorageForm::kLocal, StorageForm::kRaw, StorageForm::kAbsolute}) {
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        ScenarioSpec spec;
        spec.num_qo_heads = 8;
        spec.num_kv_heads = 2;
        spec.head_dim = 32;
        spec.num_layers = 2;
        spec.layer = 1;
        spec.doc_form = doc;
        spec.tail_form = tail;
        spec.pair_layout = pairs;
        spec.partial_rotary = i % 3 == 2 ? 0.5 : 1.0;
        spec.schedule = i % 2 ? RopeType::kLlama3 : RopeType::kYarn;
        spec.layout = kAllLayouts[static_cast<std::size_t>(i) % std::size(kAllLayouts)];
        spec.num_queries = {1, 5};
        spec.base_position = i % 2 ? 0 : std::int64_t{1} << 30;
        spec.seed = 900 + static_cast<std::uint64_t>(i++);
        ScenarioSpec fp8 = spec;
        fp8.dtype = DType::kFloat8E4M3;
        ScenarioSpec twin = spec;
        twin.dtype = DType::kFloat32;
        twin.fp8_values = true;
        const Scenario a = make_scenario(fp8), b = make_scenario(twin);
        INFO(fp8 << "\n" << a.layout_text);
        REQUIRE(a.layout_text == b.layout_text);
        REQUIRE(a.q == b.q);
        for (const Impl* impl : {&kScalar, &kEigen}) {
          for (Method method : {Method::kDeferred, Method::kEager}) {
            INFO(impl->name << " " << lazyattn::ref::to_string(method));
            const Result ra = run_attend(*impl, a, method), rb = run_attend(*impl, b, method);
            CHECK(ra.out == rb.out);
            CHECK(ra.lse == rb.lse);
          }
        }
        // And deferred RoPE over fp8 pages is eager re-encoding of them, as for every store.
        const Result d = run_attend(kScalar, a, Method::kDeferred);
        const Result e = run_attend(kEigen, a, Method::kEager);
        LAZYATTN_CHECK_CLOSE(d.out, e.out, float_tolerance());
        LAZYATTN_CHECK_CLOSE(d.lse, e.lse, float_tolerance());
      }
    }
  }
}
