// The CUDA backend of the RAG benchmark: the Llama-shaped decoder of cpu_backend.hpp in bf16 on
// one GPU. GEMMs through cuBLAS (bf16 inputs, fp32 accumulation), the residual stream in fp32,
// K/V in a lazyattn::cuda::DevicePool of bf16 or fp8 (e4m3, scales calibrated before the pool is
// made: fp8_calibration.hpp) written by cuda::write_tokens (local form), attention by
// cuda::prefill (document encodings and extends, one launch per layer for the whole step) or
// cuda::decode (steps of one-token extends only), greedy argmax on the device.
//
// Each forward() ends with a stream synchronisation, so the engine's wall-clock measurement of a
// step is the step's GPU time. copy_rotated() only queues its copy; the queue runs (one launch
// over every layer, per group of copies that do not overlap) at the start of the next forward(),
// before anything of that step writes a page.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backends.hpp"
#include "cuda_kernels.cuh"
#include "fp8_calibration.hpp"
#include "lazyattn/cuda.cuh"
#include "lazyattn/cuda/packer.hpp"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/plan_ops.hpp"
#include "lazyattn/rope/policy.hpp"
#include "random.hpp"

// Throws lazyattn::Error naming the call, file and line when a cuBLAS call fails.
#define LAZYATTN_CUBLAS_CHECK(expr)                                                          \
  do {                                                                                       \
    cublasStatus_t lazyattn_status_ = (expr);                                                \
    if (lazyattn_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::lazyattn::detail::throw_error(__FILE__, ":", __LINE__, ": ", #expr,                  \
                                      " failed: ", cublasGetStatusString(lazyattn_status_)); \
  } while (0)

namespace lazyattn::rag {

class CudaBackend final : public DeviceBackend {
 public:
  using bf16 = __nv_bfloat16;

  // Headroom left out of the KV pool: cuBLAS' own allocations, workspace growth, plans.
  static constexpr std::size_t kHeadroomBytes = std::size_t{512} << 20;
  static constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options)
      : config_(checked(config, options)),
        options_(options),
        rope_policy_(config.rope),
        params_(config.attention()) {
    LAZYATTN_CUDA_CHECK(cudaSetDevice(options_.device));
    cudaDeviceProp prop{};
    LAZYATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, options_.device));
    device_name_ = prop.name;
    // A blocking stream: it orders after DeviceRope's uploads on the legacy default stream.
    LAZYATTN_CUDA_CHECK(cudaStreamCreate(&owned_stream_.stream));
    stream_ = owned_stream_.stream;
    LAZYATTN_CUBLAS_CHECK(cublasCreate(&owned_cublas_.handle));
    cublas_ = owned_cublas_.handle;
    LAZYATTN_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    cublas_workspace_ = cuda::DeviceBuffer<std::byte>(kCublasWorkspaceBytes);
    LAZYATTN_CUBLAS_CHECK(
        cublasSetWorkspace(cublas_, cublas_workspace_.data(), cublas_workspace_.bytes()));

    init_weights();
    weights_from_host_ = options_.host_weights != nullptr;
    options_.host_weights = nullptr;  // uploaded; the caller's arrays may go away
    ensure_capacity(options_.max_step_tokens, options_.max_batch);
    rope_ = std::make_unique<cuda::DeviceRope>(rope_policy_);
    decode_options_.num_sms = prop.multiProcessorCount;
    decode_options_.ctas_per_sm = cuda::decode_ctas_per_sm(DType::kBFloat16, config_.head_dim);
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
    // fp8: the scales first, from a small bf16 pool that is freed before the real one is sized.
    if (options_.kv_dtype == DType::kFloat8E4M3) scales_ = calibrate_fp8();

    // The KV pool gets what the memory fraction leaves after weights and workspaces.
    std::size_t free_bytes = 0, total_bytes = 0;
    LAZYATTN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    total_bytes_ = total_bytes;
    used_before_kv_ = total_bytes - free_bytes;
    const double room = options_.gpu_memory_utilization * static_cast<double>(total_bytes) -
                        static_cast<double>(used_before_kv_) - static_cast<double>(kHeadroomBytes);
    const std::int64_t fit = std::min<std::int64_t>(
        room > 0 ? static_cast<std::int64_t>(room / static_cast<double>(page_bytes())) : 0,
        0x7fffffff);
    const std::int64_t pages = options_.max_pages > 0 ? options_.max_pages : fit;
    LAZYATTN_CHECK(pages >= 1 && pages <= fit, "rag::CudaBackend: ", pages, " KV pages of ",
                   page_bytes(), " bytes do not fit gpu_memory_utilization ",
                   options_.gpu_memory_utilization, " of ", gib(total_bytes), " GiB with ",
                   gib(used_before_kv_), " GiB in use (weights ", gib(weight_bytes_),
                   ", workspaces, other processes) and ", gib(kHeadroomBytes),
                   " GiB headroom: ", fit, " pages fit");
    KvStoreConfig pc = pool_config(options_.kv_dtype, pages);
    pc.k_scale = scales_.k;
    pc.v_scale = scales_.v;
    pool_ = std::make_unique<cuda::DevicePool>(pc);
    page_mark_.assign(static_cast<std::size_t>(pages), 0);
    reset_store(pages);
  }

  ~CudaBackend() override = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override {
    return "cuda (cuBLAS bf16 GEMMs, lazyattn::cuda prefill/decode, " +
           std::string(to_string(options_.kv_dtype)) + " KV) on " + device_name_;
  }
  DType kv_dtype() const override { return options_.kv_dtype; }
  std::int64_t fp8_saturated() const override { return pool_ ? pool_->fp8_saturated() : 0; }
  std::vector<float> fp8_scales(bool k) const override { return k ? scales_.k : scales_.v; }
  const ModelConfig& model() const override { return config_; }
  KvStore& store() override { return *store_; }

  std::int64_t max_pages() const override { return pool_->geometry().num_pages; }
  std::int64_t page_bytes() const override {
    return std::int64_t{2} * config_.num_layers * config_.num_kv_heads * options_.page_size *
           config_.head_dim * static_cast<std::int64_t>(size_of(options_.kv_dtype));
  }

  void reset_store(std::int64_t num_pages) override {
    LAZYATTN_CHECK(num_pages >= 1 && num_pages <= max_pages(),
                   "rag::CudaBackend::reset_store: ", num_pages, " pages, expected in [1, ",
                   max_pages(), "] (the device pool's pages)");
    copies_ = CopyQueue{};
    for (std::int32_t p : marked_pages_) page_mark_[static_cast<std::size_t>(p)] = 0;
    marked_pages_.clear();
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Bookkeeping only: the K/V are in pool_, so the host pool is one two-wide head per page.
    store_ = std::make_unique<KvStore>(KvStoreConfig{.num_layers = 1,
                                                     .num_kv_heads = 1,
                                                     .head_dim = 2,
                                                     .page_size = options_.page_size,
                                                     .dtype = DType::kBFloat16,
                                                     .num_pages = num_pages,
                                                     .eviction = options_.eviction});
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "device: " << device_name_ << ", " << gib(total_bytes_) << " GiB\n"
       << "weights: " << gib(weight_bytes_) << " GiB (bf16, "
       << (weights_from_host_ ? "uploaded from the host" : "generated on the device") << ")\n"
       << "in use before the KV pool: " << gib(used_before_kv_) << " GiB (weights, activations for "
       << row_capacity_ << " rows, cuBLAS workspace, context)\n"
       << "KV pool: " << max_pages() << " pages of " << page_bytes()
       << " bytes = " << gib(static_cast<std::size_t>(max_pages() * page_bytes()))
       << " GiB (" << to_string(options_.kv_dtype) << ", gpu_memory_utilization "
       << options_.gpu_memory_utilization << ")\n";
    if (!scales_.k.empty()) {
      auto range = [](const std::vector<float>& x) {
        const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
        std::ostringstream r;
        r << *lo << " to " << *hi;
        return r.str();
      };
      os << "fp8 scales (per layer and KV head, calibrated on " << fp8::kDocuments << " x "
         << fp8::kLength << " random tokens): K " << range(scales_.k) << ", V "
         << range(scales_.v) << "\n";
    }
    return os.str();
  }

  void forward(const StepBatch& batch, StepOutput& out, bool want_logits) override {
    const ModelConfig& c = config_;
    const int P = options_.page_size, qw = c.q_width(), kw = c.kv_width();
    flush_copies();
    std::int64_t enc_rows = 0, ext_rows = 0;
    for (const EncodeItem& e : batch.encodes)
      enc_rows += static_cast<std::int64_t>(e.tokens.size());
    for (const ExtendItem& e : batch.extends)
      ext_rows += static_cast<std::int64_t>(e.tokens.size());
    LAZYATTN_CHECK(batch.extends.empty() ||
                       (batch.plan && batch.plan->request_query_indptr.back() == ext_rows),
                   "rag::CudaBackend::forward: the plan's query rows do not match the extends' ",
                   ext_rows, " tokens");
    const std::int64_t rows = enc_rows + ext_rows;
    const auto nb = static_cast<std::int64_t>(batch.extends.size());
    if (rows == 0) {
      LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    ensure_capacity(rows, nb);

    // Rows: every encode's tokens, then every extend's, in batch order (as the CPU backend). Each
    // row's page slot and the position its K is rotated at: document-local for encodes, tail
    // index for extends. rotate_by != 0 (position-aware) writes K a second time at rotate_by + i,
    // after the layer's attention, which reads the document in local form.
    in_tokens_.clear();
    in_page_.clear();
    in_slot_.clear();
    in_pos_.clear();
    in_pos2_.clear();
    in_last_.clear();
    bool rotate_again = false;
    auto add_rows = [&](std::span<const std::int32_t> tokens,
                        const std::vector<std::int32_t>& pages, std::int64_t first,
                        std::int64_t rotate_by) {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::int64_t t = first + static_cast<std::int64_t>(i);
        in_tokens_.push_back(tokens[i]);
        in_page_.push_back(pages[static_cast<std::size_t>(t / P)]);
        in_slot_.push_back(static_cast<std::int32_t>(t % P));
        in_pos_.push_back(t);
        in_pos2_.push_back(t + rotate_by);
      }
    };
    for (const EncodeItem& e : batch.encodes) {
      add_rows(e.tokens, store_->info(e.doc).pages, 0, e.rotate_by);
      rotate_again = rotate_again || e.rotate_by != 0;
    }
    for (const ExtendItem& e : batch.extends) {
      add_rows(e.tokens, store_->info(e.tail).pages, e.first, 0);
      in_last_.push_back(static_cast<std::int32_t>(in_tokens_.size()) - 1);
    }
    for (std::int32_t t : in_tokens_) {
      LAZYATTN_CHECK(t >= 0 && t < c.vocab_size, "rag::CudaBackend::forward: token ", t,
                     ", expected in [0, ", c.vocab_size, ")");
    }

    // One plan for the step: each encode a request whose only segment is its document's pages as
    // a causal tail at start 0 (document encoding), then the engine's requests.
    const Plan* plan = batch.plan;
    Plan combined;
    if (!batch.encodes.empty()) {
      std::vector<DocHandle> docs;
      for (const EncodeItem& e : batch.encodes) docs.push_back(e.doc);
      combined = encode_plan(*store_, docs);
      if (batch.plan) append_plan(combined, *batch.plan);
      plan = &combined;
    }
    if (plan) check_plan_current(*store_, *plan, "rag::CudaBackend::forward");
    const bool decode_step = options_.decode_kernel && batch.encodes.empty() && ext_rows == nb;
    if (decode_step) {
      device_plan_.upload(*plan, cuda::make_decode_schedule(*plan, c.num_kv_heads, decode_options_),
                          stream_);
    } else {
      device_plan_.upload(
          *plan, cuda::make_prefill_schedule(*plan, c.num_kv_heads, params_.group_size()), stream_);
    }

    Upload up;
    const std::size_t o_tok = up.add(in_tokens_), o_page = up.add(in_page_),
                      o_slot = up.add(in_slot_), o_pos = up.add(in_pos_), o_pos2 = up.add(in_pos2_),
                      o_last = up.add(in_last_);
    up.send(upload_host_, step_inputs_, stream_);
    const auto* d_tokens = up.at<std::int32_t>(step_inputs_, o_tok);
    const auto* d_page = up.at<std::int32_t>(step_inputs_, o_page);
    const auto* d_slot = up.at<std::int32_t>(step_inputs_, o_slot);
    const auto* d_pos = up.at<std::int64_t>(step_inputs_, o_pos);
    const auto* d_pos2 = up.at<std::int64_t>(step_inputs_, o_pos2);
    const auto* d_last = up.at<std::int32_t>(step_inputs_, o_last);

    const auto grid_rows = static_cast<unsigned>(rows);
    const auto eps = static_cast<float>(c.rms_norm_eps);
    kernels::embed<<<grid_rows, 256, 0, stream_>>>(d_tokens, embedding_.data(), x_.data(),
                                                   c.hidden_size);
    LAZYATTN_CUDA_CHECK_LAUNCH();
    for (int l = 0; l < c.num_layers; ++l) {
      const Layer& w = layers_[static_cast<std::size_t>(l)];
      kernels::rms_norm<<<grid_rows, 256, 0, stream_>>>(x_.data(), nullptr, w.attn_norm.data(),
                                                        h_.data(), c.hidden_size, eps);
      LAZYATTN_CUDA_CHECK_LAUNCH();
      gemm(h_.data(), rows, c.hidden_size, w.wqkv.data(), qw + 2 * kw, qkv_.data(), CUDA_R_16BF,
           0.0f);
      kernels::split_qkv<<<grid_rows, 128, 0, stream_>>>(qkv_.data(), q_.data(), k_.data(),
                                                         v_.data(), qw, kw);
      LAZYATTN_CUDA_CHECK_LAUNCH();
      cuda::write_tokens(*pool_, l, DType::kBFloat16, k_.data(), v_.data(),
                         static_cast<std::int32_t>(rows), d_page, d_slot, d_pos, *rope_, stream_);
      attention(l, decode_step);
      if (rotate_again) {
        std::int64_t r0 = 0;
        for (const EncodeItem& e : batch.encodes) {
          const auto n = static_cast<std::int64_t>(e.tokens.size());
          if (e.rotate_by != 0) {
            cuda::write_tokens(*pool_, l, DType::kBFloat16, k_.data() + r0 * kw,
                               v_.data() + r0 * kw, static_cast<std::int32_t>(n), d_page + r0,
                               d_slot + r0, d_pos2 + r0, *rope_, stream_);
          }
          r0 += n;
        }
      }
      gemm(attn_.data(), rows, qw, w.wo.data(), c.hidden_size, x_.data(), CUDA_R_32F, 1.0f);
      kernels::rms_norm<<<grid_rows, 256, 0, stream_>>>(x_.data(), nullptr, w.mlp_norm.data(),
                                                        h_.data(), c.hidden_size, eps);
      LAZYATTN_CUDA_CHECK_LAUNCH();
      gemm(h_.data(), rows, c.hidden_size, w.w_gate_up.data(), 2 * c.intermediate_size,
           gate_up_.data(), CUDA_R_16BF, 0.0f);
      kernels::swiglu<<<grid_rows, 256, 0, stream_>>>(gate_up_.data(), act_.data(),
                                                      c.intermediate_size);
      LAZYATTN_CUDA_CHECK_LAUNCH();
      gemm(act_.data(), rows, c.intermediate_size, w.w_down.data(), c.hidden_size, x_.data(),
           CUDA_R_32F, 1.0f);
    }

    // The LM head on each extend's last row only.
    out.next_tokens.assign(static_cast<std::size_t>(nb), 0);
    if (nb > 0) {
      kernels::rms_norm<<<static_cast<unsigned>(nb), 256, 0, stream_>>>(
          x_.data(), d_last, final_norm_.data(), last_h_.data(), c.hidden_size, eps);
      LAZYATTN_CUDA_CHECK_LAUNCH();
      const bf16* head = lm_head_.size() ? lm_head_.data() : embedding_.data();
      gemm(last_h_.data(), nb, c.hidden_size, head, c.vocab_size, logits_.data(), CUDA_R_32F, 0.0f);
      kernels::argmax<<<static_cast<unsigned>(nb), 256, 0, stream_>>>(logits_.data(), c.vocab_size,
                                                                      next_.data());
      LAZYATTN_CUDA_CHECK_LAUNCH();
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(out.next_tokens.data(), next_.data(),
                                          static_cast<std::size_t>(nb) * sizeof(std::int32_t),
                                          cudaMemcpyDeviceToHost, stream_));
      if (want_logits) {
        out.logits.resize(static_cast<std::size_t>(nb) * static_cast<std::size_t>(c.vocab_size));
        LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(out.logits.data(), logits_.data(),
                                            out.logits.size() * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_));
      }
    }
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy_rotated(std::span<const std::int32_t> src, std::int64_t src_first,
                    std::span<const std::int32_t> dst, std::int64_t length,
                    std::int64_t delta) override {
    if (length <= 0) return;
    const std::int64_t P = options_.page_size;
    const std::int64_t src_last_page = (src_first + length - 1) / P,
                       dst_last_page = (length - 1) / P;
    LAZYATTN_CHECK(src_first >= 0 && src_last_page < static_cast<std::int64_t>(src.size()) &&
                       dst_last_page < static_cast<std::int64_t>(dst.size()),
                   "rag::CudaBackend::copy_rotated: tokens [", src_first, ", ", src_first + length,
                   ") of ", src.size(), " source pages into ", dst.size(), " pages of ", P);
    // A copy that reads a page an earlier queued copy writes, or writes a page one reads or
    // writes, starts a new group: groups run in order, the copies within one in parallel.
    bool conflict = false;
    for (std::int64_t i = src_first / P; i <= src_last_page; ++i)
      conflict = conflict || mark(src[static_cast<std::size_t>(i)]) == kWritten;
    for (std::int64_t i = 0; i <= dst_last_page; ++i)
      conflict = conflict || mark(dst[static_cast<std::size_t>(i)]) != 0;
    if (conflict) close_copy_group();
    for (std::int64_t i = src_first / P; i <= src_last_page; ++i)
      set_mark(src[static_cast<std::size_t>(i)], kRead);
    for (std::int64_t i = 0; i <= dst_last_page; ++i)
      set_mark(dst[static_cast<std::size_t>(i)], kWritten);
    for (std::int64_t i = 0; i < length; ++i) {
      const std::int64_t s = src_first + i;
      copies_.src_page.push_back(src[static_cast<std::size_t>(s / P)]);
      copies_.src_slot.push_back(static_cast<std::int32_t>(s % P));
      copies_.dst_page.push_back(dst[static_cast<std::size_t>(i / P)]);
      copies_.dst_slot.push_back(static_cast<std::int32_t>(i % P));
      copies_.delta.push_back(delta);
    }
  }

  void warm_up(std::int64_t doc_length, std::int64_t question_length) override {
    const std::int64_t P = options_.page_size;
    const std::int64_t need = 2 * ((doc_length + P - 1) / P) + (question_length + 2 + P - 1) / P;
    reset_store(max_pages());
    if (doc_length < 1 || question_length < 1 || need > max_pages()) return;
    KvStore& s = *store_;
    const auto length = static_cast<std::size_t>(doc_length);
    std::vector<std::int32_t> doc(length), question(static_cast<std::size_t>(question_length));
    for (std::size_t i = 0; i < doc.size(); ++i)
      doc[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(config_.vocab_size));
    for (std::size_t i = 0; i < question.size(); ++i) question[i] = doc[i % doc.size()];
    StepOutput out;
    const DocHandle a = s.allocate(DocKey{0x3a7a, 1}, StorageForm::kLocal, doc_length).handle;
    StepBatch encode;
    encode.encodes.push_back(EncodeItem{a, doc, 0});
    forward(encode, out, false);
    s.commit(a);
    const DocHandle b = s.allocate(DocKey{0x3a7a, 2}, StorageForm::kLocal, doc_length).handle;
    copy_rotated(s.info(a).pages, 0, s.info(b).pages, doc_length, doc_length);
    s.commit(b);
    const TailHandle t = s.create_tail(StorageForm::kLocal);
    auto extend = [&](std::span<const std::int32_t> tokens) {
      const auto n = static_cast<std::int64_t>(tokens.size());
      const std::int64_t first = s.reserve(t, n);
      RequestLayout r;
      r.segments = {Segment::document(a, doc_length, 0), Segment::document(b, doc_length, 0),
                    Segment::of_tail(t, first + n, 2 * doc_length)};
      r.num_queries = n;
      const Plan plan = make_plan(s, r);
      StepBatch step;
      step.extends.push_back(ExtendItem{t, first, tokens});
      step.plan = &plan;
      forward(step, out, true);
    };
    extend(question);
    extend(std::span<const std::int32_t>(question.data(), 1));  // a decode step
    extend(std::span<const std::int32_t>(question.data(), 1));
    reset_store(max_pages());
  }

 private:
  // Owners of the stream and the cuBLAS handle, so that a constructor that throws half-way
  // releases them (declared before every buffer: destroyed after them).
  struct OwnedStream {
    cudaStream_t stream = nullptr;
    OwnedStream() = default;
    OwnedStream(const OwnedStream&) = delete;
    OwnedStream& operator=(const OwnedStream&) = delete;
    ~OwnedStream() {
      if (stream) cudaStreamDestroy(stream);
    }
  };
  struct OwnedCublas {
    cublasHandle_t handle = nullptr;
    OwnedCublas() = default;
    OwnedCublas(const OwnedCublas&) = delete;
    OwnedCublas& operator=(const OwnedCublas&) = delete;
    ~OwnedCublas() {
      if (handle) cublasDestroy(handle);
    }
  };

  struct Layer {
    cuda::DeviceBuffer<float> attn_norm, mlp_norm;
    cuda::DeviceBuffer<bf16> wqkv, wo, w_gate_up, w_down;
  };

  // Copies queued by copy_rotated, one entry per token; group_end closes each ordered group.
  struct CopyQueue {
    std::vector<std::int32_t> src_page, src_slot, dst_page, dst_slot, group_end;
    std::vector<std::int64_t> delta;
  };
  static constexpr std::uint8_t kRead = 1, kWritten = 2;

  // Host arrays packed back to back (cuda::detail::Packer) and sent to the device in one copy.
  class Upload {
   public:
    template <class T>
    std::size_t add(const std::vector<T>& v) {
      return packer_.add(v);
    }
    // From pageable memory: cudaMemcpyAsync returns once the host bytes are staged, so `host`
    // may be rewritten at once; `device` is reused in stream order.
    void send(std::vector<std::byte>& host, cuda::DeviceBuffer<std::byte>& device,
              cudaStream_t stream) const {
      host.resize(std::max<std::size_t>(packer_.size(), 16));
      packer_.write(host.data());
      if (device.size() < host.size()) {
        LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old buffer may be in use
        device.reserve(host.size() * 2);
      }
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), packer_.size(),
                                          cudaMemcpyHostToDevice, stream));
    }
    template <class T>
    static T* at(cuda::DeviceBuffer<std::byte>& device, std::size_t offset) {
      return reinterpret_cast<T*>(device.data() + offset);
    }

   private:
    cuda::detail::Packer packer_;
  };

  static double gib(std::size_t bytes) { return static_cast<double>(bytes) / (1u << 30); }

  // Everything the kernels cannot run is refused here, before the GPU is touched.
  static const ModelConfig& checked(const ModelConfig& c, const CudaBackendOptions& o) {
    const char* w = "rag::CudaBackend";
    LAZYATTN_CHECK(cuda::supports_head_dim(c.head_dim), w, ": config ",
                   c.name, " head_dim ", c.head_dim, ", expected one of ",
                   cuda::supported_head_dims(), " (the CUDA attention kernels' head dims)");
    LAZYATTN_CHECK(
        c.num_kv_heads >= 1 && c.num_qo_heads >= 1 && c.num_qo_heads % c.num_kv_heads == 0, w,
        ": config ", c.name, " num_qo_heads ", c.num_qo_heads, " and num_kv_heads ", c.num_kv_heads,
        ", expected a multiple of num_kv_heads");
    const int group = c.num_qo_heads / c.num_kv_heads;
    LAZYATTN_CHECK(group <= 16 && 128 % group == 0, w, ": config ", c.name, " GQA group size ",
                   group,
                   ", expected a divisor of 128 no larger than 16 (decode packs a group "
                   "into 16 rows, prefill into 128-row tiles)");
    LAZYATTN_CHECK(c.hidden_size >= 8 && c.hidden_size % 8 == 0 && c.intermediate_size >= 8 &&
                       c.intermediate_size % 8 == 0 && c.vocab_size >= 1,
                   w, ": config ", c.name, " hidden_size ", c.hidden_size, ", intermediate_size ",
                   c.intermediate_size, ", vocab_size ", c.vocab_size,
                   ", expected multiples of 8 and a vocabulary");
    LAZYATTN_CHECK(c.rope.head_dim == c.head_dim, w, ": config ", c.name, " rope head_dim ",
                   c.rope.head_dim, ", expected the model's ", c.head_dim);
    const RopePolicy rope(c.rope);
    LAZYATTN_CHECK(!rope.depends_on_length(), w, ": config ", c.name, " rope_type ",
                   to_string(rope.rope_type()),
                   " depends on the request length, expected one that does not (keys are stored "
                   "in local form)");
    LAZYATTN_CHECK(rope.rotary_dim() % 32 == 0, w, ": config ", c.name, " rotary_dim ",
                   rope.rotary_dim(), ", expected a multiple of 32");
    LAZYATTN_CHECK(
        o.page_size >= 1 && o.page_size <= 1024 && (o.page_size & (o.page_size - 1)) == 0, w,
        ": page_size ", o.page_size, ", expected a power of two in [1, 1024]");
    LAZYATTN_CHECK(o.kv_dtype == DType::kBFloat16 || o.kv_dtype == DType::kFloat8E4M3, w,
                   ": kv_dtype ", to_string(o.kv_dtype), ", expected bfloat16 or float8_e4m3");
    LAZYATTN_CHECK(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1, w,
                   ": gpu_memory_utilization ", o.gpu_memory_utilization, ", expected in (0, 1]");
    LAZYATTN_CHECK(o.max_step_tokens >= 1 && o.max_batch >= 1 && o.max_pages >= 0, w,
                   ": max_step_tokens ", o.max_step_tokens, ", max_batch ", o.max_batch,
                   ", max_pages ", o.max_pages, ", expected >= 1, >= 1, >= 0");
    return c;
  }

  // Weights as the CPU backend draws them (linear layers uniform with unit output variance,
  // norms ones): uploaded from host_weights, or drawn on the device from the same bounds.
  void init_weights() {
    const ModelConfig& c = config_;
    const HostWeights* hw = options_.host_weights;
    if (hw) {
      LAZYATTN_CHECK(static_cast<int>(hw->layers.size()) == c.num_layers,
                     "rag::CudaBackend: host weights have ", hw->layers.size(),
                     " layers, expected ", c.num_layers);
    }
    std::uint64_t stream = 0;
    auto linear = [&](std::int64_t rows, std::int64_t cols, float bound,
                      const std::vector<float>* host, const char* what) {
      const std::int64_t n = rows * cols;
      cuda::DeviceBuffer<bf16> w(static_cast<std::size_t>(n));
      if (hw) {
        LAZYATTN_CHECK(host->size() == static_cast<std::size_t>(n), "rag::CudaBackend: host ", what,
                       " has ", host->size(), " values, expected ", rows, " x ", cols);
        std::vector<bfloat16> b(host->size());
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = from_float<bfloat16>((*host)[i]);
        LAZYATTN_CUDA_CHECK(cudaMemcpy(w.data(), b.data(), w.bytes(), cudaMemcpyHostToDevice));
      } else {
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((n + 255) / 256, 8192));
        kernels::fill_uniform<<<blocks, 256, 0, stream_>>>(
            w.data(), n, mix_seed(options_.weight_seed, 200, stream), bound);
        LAZYATTN_CUDA_CHECK_LAUNCH();
      }
      ++stream;
      weight_bytes_ += w.bytes();
      return w;
    };
    auto norm = [&](const std::vector<float>* host, const char* what) {
      cuda::DeviceBuffer<float> w(static_cast<std::size_t>(c.hidden_size));
      if (hw) {
        LAZYATTN_CHECK(host->size() == w.size(), "rag::CudaBackend: host ", what, " has ",
                       host->size(), " values, expected ", c.hidden_size);
        LAZYATTN_CUDA_CHECK(cudaMemcpy(w.data(), host->data(), w.bytes(), cudaMemcpyHostToDevice));
      } else {
        kernels::fill_value<<<1, 256, 0, stream_>>>(w.data(), c.hidden_size, 1.0f);
        LAZYATTN_CUDA_CHECK_LAUNCH();
      }
      weight_bytes_ += w.bytes();
      return w;
    };
    auto bound = [](int in) { return std::sqrt(3.0f / static_cast<float>(in)); };
    const int h = c.hidden_size, qkv = c.q_width() + 2 * c.kv_width(), inter = c.intermediate_size;
    embedding_ =
        linear(c.vocab_size, h, std::sqrt(3.0f), hw ? &hw->embedding : nullptr, "embedding");
    for (int l = 0; l < c.num_layers; ++l) {
      const HostWeights::Layer* hl = hw ? &hw->layers[static_cast<std::size_t>(l)] : nullptr;
      Layer w;
      w.attn_norm = norm(hl ? &hl->attn_norm : nullptr, "attn_norm");
      w.wqkv = linear(qkv, h, bound(h), hl ? &hl->wqkv : nullptr, "wqkv");
      w.wo = linear(h, c.q_width(), bound(c.q_width()), hl ? &hl->wo : nullptr, "wo");
      w.mlp_norm = norm(hl ? &hl->mlp_norm : nullptr, "mlp_norm");
      w.w_gate_up = linear(2 * inter, h, bound(h), hl ? &hl->w_gate_up : nullptr, "w_gate_up");
      w.w_down = linear(h, inter, bound(inter), hl ? &hl->w_down : nullptr, "w_down");
      layers_.push_back(std::move(w));
    }
    final_norm_ = norm(hw ? &hw->final_norm : nullptr, "final_norm");
    if (!c.tie_word_embeddings)
      lm_head_ = linear(c.vocab_size, h, bound(h), hw ? &hw->lm_head : nullptr, "lm_head");
  }

  // Activation buffers for `rows` tokens and `batch` LM-head rows; grown (never shrunk) on demand.
  void ensure_capacity(std::int64_t rows, std::int64_t batch) {
    const ModelConfig& c = config_;
    if (rows > row_capacity_) {
      LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const auto r = static_cast<std::size_t>(rows);
      const auto hid = static_cast<std::size_t>(c.hidden_size);
      const auto qw = static_cast<std::size_t>(c.q_width()),
                 kw = static_cast<std::size_t>(c.kv_width());
      const auto inter = static_cast<std::size_t>(c.intermediate_size);
      // Free the old buffers before allocating the new ones.
      x_ = cuda::DeviceBuffer<float>();
      for (auto* b : {&h_, &qkv_, &q_, &k_, &v_, &attn_, &gate_up_, &act_})
        *b = cuda::DeviceBuffer<bf16>();
      x_ = cuda::DeviceBuffer<float>(r * hid);
      h_ = cuda::DeviceBuffer<bf16>(r * hid);
      qkv_ = cuda::DeviceBuffer<bf16>(r * (qw + 2 * kw));
      q_ = cuda::DeviceBuffer<bf16>(r * qw);
      k_ = cuda::DeviceBuffer<bf16>(r * kw);
      v_ = cuda::DeviceBuffer<bf16>(r * kw);
      attn_ = cuda::DeviceBuffer<bf16>(r * qw);
      gate_up_ = cuda::DeviceBuffer<bf16>(r * 2 * inter);
      act_ = cuda::DeviceBuffer<bf16>(r * inter);
      row_capacity_ = rows;
    }
    if (batch > batch_capacity_) {
      LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const auto b = static_cast<std::size_t>(batch);
      last_h_ = cuda::DeviceBuffer<bf16>(b * static_cast<std::size_t>(c.hidden_size));
      logits_ = cuda::DeviceBuffer<float>(b * static_cast<std::size_t>(c.vocab_size));
      next_ = cuda::DeviceBuffer<std::int32_t>(b);
      batch_capacity_ = batch;
    }
  }

  // y[rows, out] = x[rows, in] w[out, in]^T + beta y, row-major; in cuBLAS' column-major terms
  // y^T = w x^T, so w is the transposed A operand. bf16 inputs, fp32 accumulation.
  void gemm(const bf16* x, std::int64_t rows, int in, const bf16* w, int out, void* y,
            cudaDataType_t y_type, float beta) {
    const float alpha = 1.0f;
    LAZYATTN_CUBLAS_CHECK(cublasGemmEx(
        cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, static_cast<int>(rows), in, &alpha, w, CUDA_R_16BF,
        in, x, CUDA_R_16BF, in, &beta, y, y_type, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  void attention(int layer, bool decode_step) {
    if (decode_step) {
      cuda::DecodeArgs a;
      a.dtype = DType::kBFloat16;
      a.q = q_.data();
      a.o = attn_.data();
      a.layer = layer;
      a.params = params_;
      cuda::decode(a, *pool_, device_plan_, *rope_, decode_ws_, stream_);
    } else {
      cuda::PrefillArgs a;
      a.dtype = DType::kBFloat16;
      a.q = q_.data();
      a.o = attn_.data();
      a.layer = layer;
      a.params = params_;
      cuda::prefill(a, *pool_, device_plan_, *rope_, &prefill_ws_, stream_);
    }
  }

  KvStoreConfig pool_config(DType dtype, std::int64_t pages) const {
    return KvStoreConfig{.num_layers = config_.num_layers,
                         .num_kv_heads = config_.num_kv_heads,
                         .head_dim = config_.head_dim,
                         .page_size = options_.page_size,
                         .dtype = dtype,
                         .num_pages = pages};
  }

  // The fp8 scales of this model (fp8_calibration.hpp): the calibration documents encoded by
  // forward() into a bf16 pool of their pages, downloaded, measured; pool and store are freed.
  fp8::Scales calibrate_fp8() {
    const std::int64_t pages_per_doc = (fp8::kLength + options_.page_size - 1) / options_.page_size;
    const KvStoreConfig cc = pool_config(DType::kBFloat16, fp8::kDocuments * pages_per_doc);
    pool_ = std::make_unique<cuda::DevicePool>(cc);
    page_mark_.assign(static_cast<std::size_t>(cc.num_pages), 0);
    reset_store(cc.num_pages);
    const std::vector<std::vector<std::int32_t>> docs =
        fp8::documents(config_.vocab_size, options_.weight_seed);
    StepBatch batch;
    std::vector<std::vector<std::int32_t>> pages;
    for (const std::vector<std::int32_t>& d : docs) {
      const DocHandle h =
          store_->allocate(DocKey::from_tokens(d), StorageForm::kLocal, fp8::kLength).handle;
      batch.encodes.push_back(EncodeItem{h, d});
      pages.push_back(store_->info(h).pages);
    }
    StepOutput out;
    forward(batch, out, false);
    KvStore host(cc);
    std::vector<std::int32_t> all(static_cast<std::size_t>(cc.num_pages));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int32_t>(i);
    pool_->download_pages(host, all, stream_);
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    fp8::Scales s = fp8::scales_from<bfloat16>(host, pages, rope_policy_.base_frequencies());
    store_.reset();
    pool_.reset();
    page_mark_.clear();
    return s;
  }

  std::uint8_t mark(std::int32_t page) const {
    LAZYATTN_CHECK(page >= 0 && page < max_pages(), "rag::CudaBackend::copy_rotated: page id ",
                   page, ", expected in [0, ", max_pages(), ")");
    return page_mark_[static_cast<std::size_t>(page)];
  }
  void set_mark(std::int32_t page, std::uint8_t m) {
    std::uint8_t& slot = page_mark_[static_cast<std::size_t>(page)];
    if (slot == 0) marked_pages_.push_back(page);
    slot = std::max(slot, m);
  }
  void close_copy_group() {
    const auto n = static_cast<std::int32_t>(copies_.src_page.size());
    if (copies_.group_end.empty() || copies_.group_end.back() != n) copies_.group_end.push_back(n);
    for (std::int32_t p : marked_pages_) page_mark_[static_cast<std::size_t>(p)] = 0;
    marked_pages_.clear();
  }

  // Runs the queued copies: one launch per group over its tokens and every layer.
  void flush_copies() {
    if (copies_.src_page.empty()) return;
    close_copy_group();
    Upload up;
    const std::size_t o_sp = up.add(copies_.src_page), o_ss = up.add(copies_.src_slot),
                      o_dp = up.add(copies_.dst_page), o_ds = up.add(copies_.dst_slot),
                      o_d = up.add(copies_.delta);
    up.send(copy_host_, copy_inputs_, stream_);
    const PoolGeometry& geo = pool_->geometry();
    kernels::CopyParams p{};
    p.k_pool = pool_->k_layer(0);
    p.v_pool = pool_->v_layer(0);
    const bool fp8 = pool_->dtype() == DType::kFloat8E4M3;
    if (fp8) {
      p.k_scale = pool_->k_scales(0);  // [num_layers][num_kv_heads]
      p.saturated = pool_->saturation_counter();
    }
    p.src_page = up.at<std::int32_t>(copy_inputs_, o_sp);
    p.src_slot = up.at<std::int32_t>(copy_inputs_, o_ss);
    p.dst_page = up.at<std::int32_t>(copy_inputs_, o_dp);
    p.dst_slot = up.at<std::int32_t>(copy_inputs_, o_ds);
    p.delta = up.at<std::int64_t>(copy_inputs_, o_d);
    p.rope = rope_->view();
    p.layer_stride = geo.layer_stride();
    p.page_stride = geo.page_stride();
    p.head_stride = geo.head_stride();
    p.num_kv_heads = geo.num_kv_heads;
    p.head_dim = geo.head_dim;
    const std::size_t smem =
        kernels::kCopyTokens * static_cast<std::size_t>(p.rope.rotary_dim / 2) * sizeof(float2);
    std::int32_t begin = 0;
    for (std::int32_t end : copies_.group_end) {
      p.first = begin;
      p.count = end - begin;
      if (p.count > 0) {
        const dim3 grid(
            static_cast<unsigned>((p.count + kernels::kCopyTokens - 1) / kernels::kCopyTokens),
            static_cast<unsigned>(geo.num_layers));
        if (fp8) kernels::copy_rotate<__nv_fp8_storage_t><<<grid, 256, smem, stream_>>>(p);
        else kernels::copy_rotate<bf16><<<grid, 256, smem, stream_>>>(p);
        LAZYATTN_CUDA_CHECK_LAUNCH();
      }
      begin = end;
    }
    copies_ = CopyQueue{};
  }

  ModelConfig config_;
  CudaBackendOptions options_;
  RopePolicy rope_policy_;
  AttentionParams params_;
  std::string device_name_;
  OwnedStream owned_stream_;
  cuda::DeviceBuffer<std::byte> cublas_workspace_;  // freed after the handle that uses it
  OwnedCublas owned_cublas_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  // Weights.
  cuda::DeviceBuffer<bf16> embedding_, lm_head_;  // lm_head_ empty when tied
  std::vector<Layer> layers_;
  cuda::DeviceBuffer<float> final_norm_;

  // Activations, [rows, width] row-major; the residual stream x_ in float.
  std::int64_t row_capacity_ = 0, batch_capacity_ = 0;
  cuda::DeviceBuffer<float> x_;
  cuda::DeviceBuffer<bf16> h_, qkv_, q_, k_, v_, attn_, gate_up_, act_, last_h_;
  cuda::DeviceBuffer<float> logits_;
  cuda::DeviceBuffer<std::int32_t> next_;

  // Attention: pool, plan, rope, workspaces.
  std::unique_ptr<cuda::DevicePool> pool_;
  std::unique_ptr<cuda::DeviceRope> rope_;
  cuda::DevicePlan device_plan_;
  cuda::ScheduleOptions decode_options_;
  cuda::PrefillWorkspace prefill_ws_;
  cuda::DecodeWorkspace decode_ws_;
  std::unique_ptr<KvStore> store_;

  // Per-step inputs, kept between steps so that steady decoding does not allocate.
  std::vector<std::int32_t> in_tokens_, in_page_, in_slot_, in_last_;
  std::vector<std::int64_t> in_pos_, in_pos2_;
  std::vector<std::byte> upload_host_, copy_host_;
  cuda::DeviceBuffer<std::byte> step_inputs_, copy_inputs_;

  // copy_rotated's queue and its page marks (kRead / kWritten in the open group).
  CopyQueue copies_;
  std::vector<std::uint8_t> page_mark_;
  std::vector<std::int32_t> marked_pages_;

  fp8::Scales scales_;  // fp8 pools: K's and V's, [num_layers][num_kv_heads]; else empty
  std::size_t weight_bytes_ = 0, total_bytes_ = 0, used_before_kv_ = 0;
  bool weights_from_host_ = false;
};

}  // namespace lazyattn::rag
