// lazyattn's C ABI (lazyattn_c.h), host side: where written tokens go (lazyattn_destinations) and
// plans (lazyattn_plan_*): a batch's layouts flattened, scheduled and packed for one copy.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "internal.cuh"
#include "lazyattn/cuda/support.hpp"
#include "lazyattn/cuda/schedule.hpp"

namespace lazyattn::capi {
namespace {

// Which page list and length a write item names.
struct ItemPages {
  std::vector<std::int32_t> pages;
  std::int64_t length = 0;
  StorageForm form = StorageForm::kRaw;
};
ItemPages item_pages(const lazyattn_pool_t& pool, std::int32_t kind, std::uint64_t handle,
                     const char* where, std::int32_t i) {
  try {
    if (kind == LAZYATTN_SEGMENT_DOCUMENT) {
      DocInfo d = pool.pages.info(unpack_doc(pool, handle));
      return ItemPages{std::move(d.pages), d.length, d.form};
    }
    LAZYATTN_CHECK(kind == LAZYATTN_SEGMENT_TAIL, where, ": item ", i, " kind ", kind,
                   ", expected 0 (document) or 1 (tail)");
    TailInfo t = pool.pages.info(unpack_tail(pool, handle));
    return ItemPages{std::move(t.pages), t.length, t.form};
  } catch (const Error& e) {
    std::string_view m = e.what();
    if (m.starts_with(where)) throw;
    ::lazyattn::detail::throw_error(where, ": item ", i, ": ", e.what());
  }
}

}  // namespace
}  // namespace lazyattn::capi

using namespace lazyattn;
using namespace lazyattn::capi;

extern "C" {

// ---- write destinations -------------------------------------------------------------------------

lazyattn_status lazyattn_destinations_bytes(int64_t num_tokens, int32_t flags, int64_t* bytes) {
  const char* w = "lazyattn_destinations_bytes";
  return guarded(w, [&] {
    check_out(bytes, w);
    LAZYATTN_CHECK(num_tokens >= 0 && num_tokens < (std::int64_t{1} << 31), w, ": num_tokens ",
                   num_tokens, ", expected in [0, 2^31)");
    LAZYATTN_CHECK((flags & ~LAZYATTN_WRITE_ROTATE) == 0, w, ": flags ", flags,
                   ", expected 0 or LAZYATTN_WRITE_ROTATE (1)");
    const std::int64_t ints = (2 * num_tokens * 4 + 7) / 8 * 8;
    *bytes = ints + ((flags & LAZYATTN_WRITE_ROTATE) ? num_tokens * 8 : 0);
  });
}

lazyattn_status lazyattn_destinations(lazyattn_pool pool, int32_t num_items, const int32_t* kinds,
                                      const uint64_t* handles, const int64_t* first,
                                      const int64_t* count, int32_t flags, void* dst,
                                      int64_t dst_bytes, int64_t* num_tokens) {
  const char* w = "lazyattn_destinations";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    LAZYATTN_CHECK(num_items >= 0, w, ": num_items ", num_items, ", expected >= 0");
    LAZYATTN_CHECK(num_items == 0 || (kinds && handles && first && count), w,
                   ": kinds, handles, first and count must each hold num_items values");
    LAZYATTN_CHECK((flags & ~LAZYATTN_WRITE_ROTATE) == 0, w, ": flags ", flags,
                   ", expected 0 or LAZYATTN_WRITE_ROTATE (1)");
    const bool rotate = (flags & LAZYATTN_WRITE_ROTATE) != 0;
    std::vector<ItemPages> items;
    items.reserve(static_cast<std::size_t>(num_items));
    std::int64_t total = 0;
    for (std::int32_t i = 0; i < num_items; ++i) {
      items.push_back(item_pages(p, kinds[i], handles[i], w, i));
      const ItemPages& it = items.back();
      LAZYATTN_CHECK(first[i] >= 0 && count[i] >= 0 && first[i] <= it.length &&
                         count[i] <= it.length - first[i],
                     w, ": item ", i, " tokens [", first[i], ", ", first[i] + count[i],
                     "), expected within [0, ", it.length,
                     ") (the document's or the reserved tail's length)");
      LAZYATTN_CHECK(!rotate || it.form == StorageForm::kLocal, w, ": item ", i, " is in ",
                     to_string(it.form),
                     " form, but LAZYATTN_WRITE_ROTATE rotates K into local form; expected K "
                     "copied as given (flags 0)");
      total += count[i];
      LAZYATTN_CHECK(total < (std::int64_t{1} << 31), w, ": more than 2^31 - 1 tokens");
    }
    std::int64_t need = 0;
    lazyattn_destinations_bytes(total, flags, &need);
    LAZYATTN_CHECK(dst != nullptr && dst_bytes >= need, w, ": dst of ", dst_bytes, " bytes for ",
                   total, " tokens, expected at least ", need);
    auto* page = static_cast<std::int32_t*>(dst);
    auto* slot = page + total;
    auto* pos =
        reinterpret_cast<std::int64_t*>(static_cast<std::byte*>(dst) + (2 * total * 4 + 7) / 8 * 8);
    const int P = p.config.page_size;
    std::int64_t t = 0;
    for (std::int32_t i = 0; i < num_items; ++i) {
      for (std::int64_t k = first[i]; k < first[i] + count[i]; ++k, ++t) {
        page[t] = items[static_cast<std::size_t>(i)].pages[static_cast<std::size_t>(k / P)];
        slot[t] = static_cast<std::int32_t>(k % P);
        if (rotate) pos[t] = k;
      }
    }
    if (num_tokens) *num_tokens = total;
  });
}

// ---- plans --------------------------------------------------------------------------------------

lazyattn_status lazyattn_plan_create(lazyattn_pool pool, lazyattn_rope rope,
                                     const lazyattn_segment* segments,
                                     const int32_t* segment_indptr, const int32_t* num_queries,
                                     int32_t num_requests, const lazyattn_plan_options* options,
                                     lazyattn_plan* out) {
  const char* w = "lazyattn_plan_create";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    ropes().check(rope, w, "lazyattn_rope");
    check_out(out, w);
    *out = nullptr;
    LAZYATTN_CHECK(options != nullptr, w, ": options is NULL, expected lazyattn_plan_options");
    const lazyattn_plan_options& o = *options;
    LAZYATTN_CHECK(o.kind == LAZYATTN_PLAN_DECODE || o.kind == LAZYATTN_PLAN_PREFILL, w, ": kind ",
                   o.kind, ", expected 0 (decode) or 1 (prefill)");
    const int Hkv = p.config.num_kv_heads;
    LAZYATTN_CHECK(o.num_qo_heads >= 1 && o.num_qo_heads % Hkv == 0, w, ": num_qo_heads ",
                   o.num_qo_heads, ", expected a positive multiple of the pool's ", Hkv,
                   " KV heads");
    LAZYATTN_CHECK(rope->device == p.device, w, ": the rope was created on device ", rope->device,
                   ", expected the pool's device ", p.device);
    LAZYATTN_CHECK(rope->policy.head_dim() == p.config.head_dim, w, ": rope head_dim ",
                   rope->policy.head_dim(), ", expected the pool's ", p.config.head_dim);
    LAZYATTN_CHECK(o.forced_splits >= 0, w, ": forced_splits ", o.forced_splits,
                   ", expected >= 0 (0: the heuristic)");
    LAZYATTN_CHECK(o.kv_splits >= 0 && o.kv_splits <= 64, w, ": kv_splits ", o.kv_splits,
                   ", expected 0 (automatic) to 64");
    LAZYATTN_CHECK(o.headroom_tokens >= 0 && o.headroom_tokens < (std::int64_t{1} << 30), w,
                   ": headroom_tokens ", o.headroom_tokens, ", expected in [0, 2^30)");
    lazyattn_plan_t* like =
        o.like ? plans().check(o.like, w, "lazyattn_plan (options.like)") : nullptr;
    LAZYATTN_CHECK(!like || (like->pool == &p && like->kind == o.kind &&
                             like->num_qo_heads == o.num_qo_heads && like->rope == rope),
                   w, ": options.like was made for another pool, kind, head count or rope");
    LAZYATTN_CHECK(num_requests >= 1, w, ": num_requests ", num_requests, ", expected >= 1");
    LAZYATTN_CHECK(segment_indptr != nullptr, w,
                   ": segment_indptr is NULL, expected num_requests + 1 offsets");
    LAZYATTN_CHECK(segment_indptr[0] == 0, w, ": segment_indptr[0] ", segment_indptr[0],
                   ", expected 0");
    for (int32_t b = 0; b < num_requests; ++b) {
      LAZYATTN_CHECK(segment_indptr[b + 1] >= segment_indptr[b], w, ": segment_indptr[", b + 1,
                     "] ", segment_indptr[b + 1], ", expected >= segment_indptr[", b, "] ",
                     segment_indptr[b]);
    }
    const std::int32_t num_segments = segment_indptr[num_requests];
    LAZYATTN_CHECK(segments != nullptr || num_segments == 0, w, ": segments is NULL, expected ",
                   num_segments, " segments");
    LAZYATTN_CHECK(o.kind == LAZYATTN_PLAN_PREFILL || num_queries == nullptr, w,
                   ": num_queries given for a decode plan, expected NULL (one query each)");

    auto plan = std::make_unique<lazyattn_plan_t>();
    plan->pool = &p;
    plan->rope = rope;
    plan->kind = o.kind;
    plan->num_qo_heads = o.num_qo_heads;
    const int G = o.num_qo_heads / Hkv;
    std::vector<RequestLayout> layouts(static_cast<std::size_t>(num_requests));
    for (int32_t b = 0; b < num_requests; ++b) {
      RequestLayout& r = layouts[static_cast<std::size_t>(b)];
      r.num_queries = num_queries ? num_queries[b] : 1;
      for (int32_t i = segment_indptr[b]; i < segment_indptr[b + 1]; ++i) {
        const lazyattn_segment& s = segments[i];
        if (s.kind == LAZYATTN_SEGMENT_DOCUMENT) {
          r.segments.push_back(Segment::document(unpack_doc(p, s.handle), s.length, s.start));
        } else if (s.kind == LAZYATTN_SEGMENT_TAIL) {
          r.segments.push_back(Segment::of_tail(unpack_tail(p, s.handle), s.length, s.start));
        } else {
          ::lazyattn::detail::throw_error(w, ": request ", b, " segment ", i - segment_indptr[b],
                                          " kind ", s.kind, ", expected 0 (document) or 1 (tail)");
        }
      }
    }
    plan->plan = make_plan(p.pages, std::span<const RequestLayout>(layouts));
    const Plan& pl = plan->plan;
    for (std::int32_t s = 0; s < pl.num_segments(); ++s)
      rope->policy.check_form(static_cast<StorageForm>(pl.segment_form[s]), w);

    DeviceScope scope(p.device);
    if (o.kind == LAZYATTN_PLAN_DECODE) {
      LAZYATTN_CHECK(cuda::supports_decode_group(G), w, ": GQA group size ", G, " (",
                     o.num_qo_heads, " / ", Hkv, "), expected <= ", cuda::kMaxDecodeGroup,
                     " for decode");
      if (p.sm_count == 0) {
        p.sm_count = cuda::device_sm_count();
        // (an fp8 pool's decode has the bf16 kernel's shared memory and no more registers)
        const DType kernel_dtype =
            p.config.dtype == DType::kFloat8E4M3 ? DType::kBFloat16 : p.config.dtype;
        p.ctas_per_sm = decode_ctas_per_sm(kernel_dtype, p.config.head_dim);
      }
      cuda::ScheduleOptions so;
      so.num_sms = p.sm_count;
      so.ctas_per_sm = p.ctas_per_sm;
      so.forced_splits = o.forced_splits;
      if (like) so.request_splits = like->schedule.request_num_splits;
      plan->schedule = cuda::make_decode_schedule(pl, Hkv, so);
    } else {
      LAZYATTN_CHECK(cuda::supports_prefill_group(G), w, ": GQA group size ", G,
                     ", expected a power of two dividing ", cuda::kPrefillTileRows, " for prefill");
      plan->schedule = cuda::make_prefill_schedule(pl, Hkv, G);
    }
    cuda::PlanHeadroom room;
    if (o.headroom_tokens > 0) {
      room.tiles =
          static_cast<std::int64_t>(num_requests) *
          ((o.headroom_tokens + plan->schedule.tile_keys - 1) / plan->schedule.tile_keys + 1);
      room.pages = static_cast<std::int64_t>(num_requests) *
                   ((o.headroom_tokens + p.config.page_size - 1) / p.config.page_size + 1);
    }
    plan->packed = cuda::pack_plan(pl, plan->schedule, like ? &like->packed : nullptr, room);

    // Length-dependent schedules: the requests' frequency sets after the plan's arrays.
    if (rope->policy.depends_on_length()) {
      plan->plan_rope = std::make_unique<cuda::DeviceRope>(rope->policy);
      std::vector<std::uint64_t> turns;
      std::vector<float2> cs;
      plan->plan_rope->plan_sets(pl, turns, cs);
      std::vector<std::byte>& img = plan->packed.bytes;
      // After the plan's arrays (with `like`, its image already has like's size: the same places).
      const std::size_t t_off = like ? like->rope_turns_offset : (img.size() + 15) / 16 * 16;
      const std::size_t c_off =
          like ? like->rope_cs_offset : (t_off + turns.size() * 8 + 15) / 16 * 16;
      const std::size_t end = c_off + cs.size() * sizeof(float2);
      LAZYATTN_CHECK(!like || like->packed.bytes.size() == end, w,
                     ": the plan's frequency sets do not fit where options.like's are");
      img.resize(end, std::byte{0});
      std::memcpy(img.data() + t_off, turns.data(), turns.size() * 8);
      std::memcpy(img.data() + c_off, cs.data(), cs.size() * sizeof(float2));
      plan->rope_turns_offset = t_off;
      plan->rope_cs_offset = c_off;
    }

    // The workspace: decode's split counters, partial lse and outputs; prefill's split partials.
    const std::int64_t D = p.config.head_dim;
    auto align = [](std::size_t x) { return (x + 255) / 256 * 256; };
    if (o.kind == LAZYATTN_PLAN_DECODE) {
      const std::int64_t partials = plan->schedule.num_partials;
      plan->ws_counters = 0;
      plan->ws_lse = align(static_cast<std::size_t>(num_requests) * Hkv * 4);
      plan->ws_o = align(plan->ws_lse + static_cast<std::size_t>(partials * o.num_qo_heads) * 4);
      plan->ws_bytes =
          partials > 0
              ? align(plan->ws_o + static_cast<std::size_t>(partials * o.num_qo_heads * D) * 4)
              : 0;
    } else {
      plan->kv_splits = o.kv_splits;
      plan->kv_splits_room = o.kv_splits > 0 ? o.kv_splits : prefill_max_auto_splits(*plan);
      const std::int64_t rows = static_cast<std::int64_t>(pl.num_queries()) * o.num_qo_heads;
      if (plan->kv_splits_room > 1) {
        plan->ws_lse = 0;
        plan->ws_o = align(static_cast<std::size_t>(plan->kv_splits_room * rows) * 4);
        plan->ws_bytes =
            align(plan->ws_o + static_cast<std::size_t>(plan->kv_splits_room * rows * D) * 4);
      }
      // The Hopper kernel's tile scratch, 16-bit: K positioned once per launch (raw-form plans,
      // local ones over segments at head dims 64 and 256, and at 128 in the other rotary
      // layouts; cuda/prefill/key_pass.cuh), or an fp8 pool's K and V dequantized
      // (cuda/prefill/fp8_tiles.cuh).
      if (const std::int64_t elems = prefill_tile_elems(*plan); elems > 0) {
        plan->ws_k = plan->ws_bytes;
        plan->ws_k_elems = elems;
        plan->ws_bytes = align(plan->ws_k + static_cast<std::size_t>(elems) * 2);
      }
    }
    LAZYATTN_CHECK(!like || like->ws_bytes >= plan->ws_bytes, w, ": the plan needs a workspace of ",
                   plan->ws_bytes, " bytes, options.like's has ", like->ws_bytes);
    if (like) {
      plan->ws_bytes = like->ws_bytes;
      plan->ws_counters = like->ws_counters;
      plan->ws_lse = like->ws_lse;
      plan->ws_o = like->ws_o;
      LAZYATTN_CHECK(like->ws_k_elems >= plan->ws_k_elems, w, ": the plan's tile scratch needs ",
                     plan->ws_k_elems, " 16-bit elements, options.like's workspace has ",
                     like->ws_k_elems);
      plan->ws_k = like->ws_k;
      plan->ws_k_elems = like->ws_k_elems;
    }
    plan->checked_epoch = p.epoch;
    plans().add(plan.get());
    *out = plan.release();
  });
}

lazyattn_status lazyattn_plan_destroy(lazyattn_plan plan) {
  return guarded("lazyattn_plan_destroy", [&] {
    if (!plan) return;
    plans().check(plan, "lazyattn_plan_destroy", "lazyattn_plan");
    // Host memory only: a kernel in flight reads the caller's copy of the image, not this.
    plans().remove(plan);
    delete plan;
  });
}

lazyattn_status lazyattn_plan_info(lazyattn_plan plan, lazyattn_plan_info_t* out) {
  const char* w = "lazyattn_plan_info";
  return guarded(w, [&] {
    plans().check(plan, w, "lazyattn_plan");
    check_out(out, w);
    lazyattn_plan_info_t i{};
    i.bytes = static_cast<int64_t>(plan->packed.bytes.size());
    i.workspace_bytes = static_cast<int64_t>(plan->ws_bytes);
    i.num_requests = plan->plan.num_requests();
    i.num_queries = plan->plan.num_queries();
    for (std::int64_t n : plan->plan.request_kv_length) i.num_keys += n;
    i.num_work = plan->kind == LAZYATTN_PLAN_DECODE
                     ? plan->schedule.num_work()
                     : static_cast<int32_t>(plan->schedule.qtile_request.size());
    i.kv_splits = plan->kv_splits_room;
    *out = i;
  });
}

lazyattn_status lazyattn_plan_pack(lazyattn_plan plan, void* dst, int64_t dst_bytes) {
  const char* w = "lazyattn_plan_pack";
  return guarded(w, [&] {
    plans().check(plan, w, "lazyattn_plan");
    const std::size_t n = plan->packed.bytes.size();
    LAZYATTN_CHECK(dst != nullptr && dst_bytes >= static_cast<int64_t>(n), w, ": dst of ",
                   dst_bytes, " bytes, expected at least the plan's ", n);
    std::memcpy(dst, plan->packed.bytes.data(), n);
  });
}

lazyattn_status lazyattn_plan_valid(lazyattn_plan plan, int32_t* valid) {
  const char* w = "lazyattn_plan_valid";
  return guarded(w, [&] {
    plans().check(plan, w, "lazyattn_plan");
    pools().check(plan->pool, w, "the plan's lazyattn_pool");
    check_out(valid, w);
    try {
      check_plan_current(*plan, w);
      *valid = 1;
    } catch (const Error&) {
      *valid = 0;
    }
  });
}

}  // extern "C"
