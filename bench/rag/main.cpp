// lazyattn_rag_bench: the end-to-end RAG serving benchmark. Runs a workload through the engine in
// each requested mode, at each arrival rate and cache size, and prints a table and JSON.
// On the CPU only the `micro`, `tiny` and `tiny-d64` configs run; built as lazyattn_rag_bench_cuda
// (LAZYATTN_RAG_CUDA), `--backend cuda` runs the model on the GPU; see docs/reproduction.md.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "rag.hpp"
#if LAZYATTN_RAG_CUDA
#include "backends.hpp"
#endif

#ifndef LAZYATTN_RAG_COMMIT
#define LAZYATTN_RAG_COMMIT "unknown"
#endif

namespace {

using namespace lazyattn;
using namespace lazyattn::rag;

struct Options {
  std::string config = "tiny";
  std::vector<Mode> modes{Mode::kLazy};
  std::vector<double> rates{0.5, 1, 2, 3, 4};
  std::vector<std::int64_t> cache_docs{20};
  std::int64_t kv_pages = 0;  // overrides cache_docs when > 0
  WorkloadConfig workload;
  EngineConfig engine;
  int page_size = 16;
  int warmup = 0;
  std::uint64_t weight_seed = 7;
  std::string out;
  bool progress = true;
  std::string backend = "cpu";
  double gpu_memory_utilization = 0.9;
  bool gpu_memory_budget = false;  // --gpu-memory-utilization given: the KV budget is what fits
  bool cpu_weights = false;
  bool decode_kernel = true;
  DType kv_dtype = DType::kFloat32;  // the pool's element type (the CUDA backend: bfloat16 unless given)
  bool kv_dtype_given = false;
  DType budget_dtype = DType::kFloat32;  // --cache-docs / --kv-pages count bytes of this type
  bool budget_dtype_given = false;
};

const char* kUsage = R"(usage: lazyattn_rag_bench [options]
  --config NAME            model: micro, tiny (CPU), tiny-d64 (both); llama-3.2-1b, llama-3.1-8b
                           (GPU) [tiny]
  --backend cpu|cuda       where the model runs; cuda only in lazyattn_rag_bench_cuda [cpu]
  --mode LIST              full, prefix, position-aware, block-attention, lazy, or all [lazy]
  --rates LIST             arrival rates, requests/s, comma-separated [0.5,1,2,3,4]
  --requests N             requests per point [120]
  --documents N            document pool size [100]
  --docs-per-request N     documents per request [5]
  --with-replacement       a request may retrieve the same document twice
  --doc-length N           tokens per document [2048]
  --question-length N      question tokens [32]
  --output-tokens N        generated tokens per request [16]
  --zipf S                 popularity exponent; 0 or --uniform for uniform [2.1]
  --uniform                uniform popularity
  --seed N                 workload seed [1]
  --weight-seed N          model weight seed [7]
  --cache-docs LIST        KV budget: documents cached beside one request's working set [20]
  --kv-pages N             KV budget in pages (instead of --cache-docs)
  --kv-dtype T             the KV pool's element type: float32, bfloat16 or float8_e4m3 (fp8
                           scales calibrated per layer and KV head); the CPU backend [float32],
                           the CUDA backend bfloat16 or float8_e4m3 [bfloat16]
  --budget-dtype T         --cache-docs and --kv-pages count the bytes of pages of this type,
                           so that pools of two types compare at one byte budget [--kv-dtype]
  --page-size N            tokens per page [16]
  --max-batch N            running requests at most [16]
  --max-step-tokens N      new tokens per engine step [16384]
  --eviction lru|segmented_lru|lfu
                           cache eviction: the store's LRU or segmented LRU, or the engine's
                           perfect LFU [lru]
  --warmup-requests N      leave the first N requests out of latency and hit statistics [0]
  --out FILE               write JSON there
  --no-progress            no progress bar on stderr
 cuda backend:
  --gpu-memory-utilization F  fraction of the GPU's memory for weights, workspaces and KV pages, as
                           vLLM's; given, the KV budget is every page that fits (instead of
                           --cache-docs); otherwise only a cap [0.9]
  --cpu-weights            load the CPU backend's weights (host-generated; small configs)
  --decode-attention K     decode (steps of one-token extends through cuda::decode) or prefill
                           (cuda::prefill for every step) [decode]
)";

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> parts;
  std::stringstream ss{std::string(s)};
  for (std::string p; std::getline(ss, p, ',');) {
    if (!p.empty()) parts.push_back(p);
  }
  return parts;
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "lazyattn_rag_bench: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

DType pool_dtype(const std::string& flag, const std::string& s) {
  if (s == "float32") return DType::kFloat32;
  if (s == "bfloat16" || s == "bf16") return DType::kBFloat16;
  if (s == "float8_e4m3" || s == "fp8") return DType::kFloat8E4M3;
  usage_error(flag + " expects float32, bfloat16 (bf16) or float8_e4m3 (fp8), got '" + s + "'");
}

double number(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') usage_error(flag + " expects a number, got '" + s + "'");
  return v;
}

int integer(const std::string& flag, const std::string& s) {
  const double v = number(flag, s);
  if (v != static_cast<double>(static_cast<long long>(v)) || v < 0 || v > 2e9)
    usage_error(flag + " expects a non-negative integer, got '" + s + "'");
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--config") {
      o.config = value();
    } else if (flag == "--mode") {
      const std::string v = value();
      o.modes.clear();
      if (v == "all") {
        o.modes.assign(std::begin(kAllModes), std::end(kAllModes));
      } else {
        for (const std::string& m : split(v)) o.modes.push_back(parse_mode(m));
      }
    } else if (flag == "--rates" || flag == "--rate") {
      o.rates.clear();
      for (const std::string& r : split(value())) o.rates.push_back(number(flag, r));
    } else if (flag == "--requests") {
      o.workload.num_requests = integer(flag, value());
    } else if (flag == "--documents") {
      o.workload.num_documents = integer(flag, value());
    } else if (flag == "--docs-per-request") {
      o.workload.docs_per_request = integer(flag, value());
    } else if (flag == "--with-replacement") {
      o.workload.with_replacement = true;
    } else if (flag == "--doc-length") {
      o.workload.doc_length = integer(flag, value());
    } else if (flag == "--question-length") {
      o.workload.question_length = integer(flag, value());
    } else if (flag == "--output-tokens") {
      o.workload.output_tokens = integer(flag, value());
    } else if (flag == "--zipf") {
      o.workload.zipf = number(flag, value());
    } else if (flag == "--uniform") {
      o.workload.zipf = 0;
    } else if (flag == "--seed") {
      o.workload.seed = static_cast<std::uint64_t>(integer(flag, value()));
    } else if (flag == "--weight-seed") {
      o.weight_seed = static_cast<std::uint64_t>(integer(flag, value()));
    } else if (flag == "--cache-docs") {
      o.cache_docs.clear();
      for (const std::string& c : split(value())) o.cache_docs.push_back(integer(flag, c));
    } else if (flag == "--kv-pages") {
      o.kv_pages = integer(flag, value());
    } else if (flag == "--kv-dtype") {
      o.kv_dtype = pool_dtype(flag, value());
      o.kv_dtype_given = true;
    } else if (flag == "--budget-dtype") {
      o.budget_dtype = pool_dtype(flag, value());
      o.budget_dtype_given = true;
    } else if (flag == "--page-size") {
      o.page_size = integer(flag, value());
    } else if (flag == "--max-batch") {
      o.engine.max_batch = integer(flag, value());
    } else if (flag == "--max-step-tokens") {
      o.engine.max_step_tokens = integer(flag, value());
    } else if (flag == "--eviction") {
      o.engine.eviction = parse_eviction(value());
    } else if (flag == "--warmup-requests") {
      o.warmup = integer(flag, value());
    } else if (flag == "--out") {
      o.out = value();
    } else if (flag == "--no-progress") {
      o.progress = false;
    } else if (flag == "--backend") {
      o.backend = value();
      if (o.backend != "cpu" && o.backend != "cuda")
        usage_error("--backend expects cpu or cuda, got '" + o.backend + "'");
    } else if (flag == "--gpu-memory-utilization") {
      o.gpu_memory_utilization = number(flag, value());
      o.gpu_memory_budget = true;
    } else if (flag == "--cpu-weights") {
      o.cpu_weights = true;
    } else if (flag == "--decode-attention") {
      const std::string v = value();
      if (v != "decode" && v != "prefill")
        usage_error("--decode-attention expects decode or prefill, got '" + v + "'");
      o.decode_kernel = v == "decode";
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  if (o.modes.empty() || o.rates.empty() || o.cache_docs.empty())
    usage_error("--mode, --rates and --cache-docs need at least one value each");
  if (o.kv_pages > 0 || (o.backend == "cuda" && o.gpu_memory_budget)) o.cache_docs = {-1};
  if (o.backend == "cuda") {
    if (!o.kv_dtype_given) o.kv_dtype = DType::kBFloat16;
    if (o.kv_dtype != DType::kBFloat16 && o.kv_dtype != DType::kFloat8E4M3)
      usage_error("--kv-dtype " + std::string(to_string(o.kv_dtype)) +
                  " with --backend cuda, expected bfloat16 or float8_e4m3 (the device pool's)");
  }
  if (!o.budget_dtype_given) o.budget_dtype = o.kv_dtype;
  return o;
}

void write_workload(JsonWriter& j, const WorkloadConfig& w) {
  j.field("documents", w.num_documents)
      .field("docs_per_request", w.docs_per_request)
      .field("with_replacement", w.with_replacement)
      .field("doc_length", w.doc_length)
      .field("question_length", w.question_length)
      .field("output_tokens", w.output_tokens)
      .field("zipf", w.zipf)
      .field("requests", w.num_requests)
      .field("seed", static_cast<long long>(w.seed));
}

int run(const Options& o) {
  const ModelConfig model = model_config(o.config);
  const bool on_gpu = o.backend == "cuda";
#if !LAZYATTN_RAG_CUDA
  if (on_gpu) {
    std::fprintf(stderr,
                 "lazyattn_rag_bench: built without CUDA; --backend cuda runs in "
                 "lazyattn_rag_bench_cuda (configure with CUDA, docs/reproduction.md)\n");
    return 2;
  }
#endif
  const bool cpu_sized = model.parameters() < 200'000'000;
  if (!on_gpu && !cpu_sized) {
    std::fprintf(stderr,
                 "lazyattn_rag_bench: config %s (%.2f B parameters) is a GPU shape; the CPU "
                 "backend runs micro, tiny and tiny-d64 only (--backend cuda for the GPU)\n",
                 o.config.c_str(), static_cast<double>(model.parameters()) * 1e-9);
    return 2;
  }
  WorkloadConfig wc = o.workload;
  wc.vocab_size = model.vocab_size;

  // The CUDA backend is built once (weights, workspaces, the KV pool sized for the largest
  // budget asked for, or for all the memory fraction allows) and gets a fresh store per point.
  std::string device;
#if LAZYATTN_RAG_CUDA
  std::unique_ptr<DeviceBackend> gpu;
  if (on_gpu) {
    CudaBackendOptions co;
    co.page_size = o.page_size;
    co.weight_seed = o.weight_seed;
    co.gpu_memory_utilization = o.gpu_memory_utilization;
    co.max_step_tokens = o.engine.max_step_tokens;
    co.max_batch = o.engine.max_batch;
    co.decode_kernel = o.decode_kernel;
    if (!o.gpu_memory_budget) {
      for (std::int64_t cache : o.cache_docs) {
        // The budget's pages of budget_dtype, as bytes, in pages of kv_dtype (as below).
        const std::int64_t budget_pages =
            o.kv_pages > 0 ? std::int64_t{o.kv_pages} : kv_pages_for_cache(wc, o.page_size, cache);
        co.max_pages = std::max(co.max_pages,
                                budget_pages * size_of(o.budget_dtype) / size_of(o.kv_dtype));
      }
    }
    HostWeights host;
    if (o.cpu_weights) {
      host = cpu_backend_weights(model, o.weight_seed);
      co.host_weights = &host;
    }
    co.eviction = store_policy(o.engine.eviction);
    co.kv_dtype = o.kv_dtype;
    gpu = make_cuda_backend(model, co);
    std::fprintf(stderr, "%s", gpu->describe().c_str());
    gpu->warm_up(wc.doc_length, wc.question_length);
    device = gpu->name();
  }
#endif

  std::ostringstream json;
  JsonWriter j(json);
  char date[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  j.open()
      .field("benchmark", "lazyattn_rag_bench")
      .field("date", date)
      .field("commit", LAZYATTN_RAG_COMMIT)
      .field("clock",
             "simulated: Poisson arrivals; each engine step advances the clock by its measured "
             "wall time on this machine")
      .field("backend", o.backend)
      .field("device", device)
      .field("model", model.name)
      .field("parameters", model.parameters())
      .field("page_size", o.page_size)
      .field("max_batch", o.engine.max_batch)
      .field("max_step_tokens", o.engine.max_step_tokens)
      .field("eviction", std::string(to_string(o.engine.eviction)))
      .field("kv_dtype", std::string(to_string(o.kv_dtype)))
      .field("budget_dtype", std::string(to_string(o.budget_dtype)))
      .field("warmup_requests", o.warmup);
  if (on_gpu) {  // so that runs of the two decode-step kernels stay apart in merged JSON
    j.field("decode_attention", o.decode_kernel ? "decode" : "prefill")
        .field("gpu_memory_utilization", o.gpu_memory_utilization);
  }
  j.open("workload");
  write_workload(j, wc);
  j.close();
  j.open("points", '[');

  std::printf("%-16s %5s %6s %9s %9s %9s %9s %8s %8s %6s %6s %6s %8s\n", "mode", "rate", "cache",
              "ttft_p50", "ttft_p90", "ttft_p99", "tpot", "req/s", "tok/s", "hit", "H_pf", "H_pa",
              "peak_MiB");
  const std::size_t points = o.modes.size() * o.rates.size() * o.cache_docs.size();
  std::size_t point = 0;
  for (std::int64_t cache : o.cache_docs) {
    for (double rate : o.rates) {
      wc.rate = rate;
      const Workload w = make_workload(wc);
      // The budget's pages of budget_dtype, as bytes, in pages of kv_dtype.
      const std::int64_t budget_pages =
          o.kv_pages > 0 ? o.kv_pages : kv_pages_for_cache(wc, o.page_size, cache);
      std::int64_t pages = budget_pages * size_of(o.budget_dtype) / size_of(o.kv_dtype);
#if LAZYATTN_RAG_CUDA
      if (gpu && o.gpu_memory_budget) pages = gpu->max_pages();
#endif
      const std::int64_t capacity = cache_docs_for_pages(wc, o.page_size, pages);
      Analytic a = analytic(wc, capacity);
      a.top_c_same_draws = top_c_hit_ratio(w, capacity, o.warmup);
      // The ideal at the budget's own document count (pools of another type hold more or fewer).
      const std::int64_t budget_docs = cache_docs_for_pages(wc, o.page_size, budget_pages);
      const double ideal_at_budget = top_c_hit_ratio(w, budget_docs, o.warmup);
      for (Mode mode : o.modes) {
        ++point;
        std::unique_ptr<CpuBackend> cpu;
        Backend* backend = nullptr;
#if LAZYATTN_RAG_CUDA
        if (gpu) {
          gpu->reset_store(pages);
          backend = gpu.get();
        }
#endif
        if (!backend) {
          cpu = std::make_unique<CpuBackend>(model, pages, o.page_size, o.weight_seed,
                                             store_policy(o.engine.eviction), o.kv_dtype);
          backend = cpu.get();
        }
        EngineConfig ec = o.engine;
        ec.mode = mode;
        ec.lfu_capacity = capacity;
        Engine engine(*backend, w, ec);
        auto bar = [&](int done, int total) {
          if (!o.progress) return;
          const int width = 30, filled = done * width / total;
          std::fprintf(stderr, "\r[%zu/%zu] %-15s rate %-4g cache %-4lld [%s%s] %d/%d", point,
                       points, std::string(to_string(mode)).c_str(), rate,
                       static_cast<long long>(capacity), std::string(filled, '#').c_str(),
                       std::string(width - filled, '.').c_str(), done, total);
          if (done == total) std::fputc('\n', stderr);
        };
        RunResult r = engine.run(bar);
#if LAZYATTN_RAG_CUDA
        if (gpu) r.page_bytes = gpu->page_bytes();  // its host store is bookkeeping only
#endif
        const Summary s = summarize(r, o.warmup);
        std::printf("%-16s %5g %6lld %9.4f %9.4f %9.4f %9.5f %8.3f %8.2f %6.3f %6.3f %6.3f %8.2f\n",
                    std::string(to_string(mode)).c_str(), rate, static_cast<long long>(capacity),
                    s.ttft_p50, s.ttft_p90, s.ttft_p99, s.tpot_mean, s.throughput_rps,
                    s.throughput_tps, s.hit_ratio, a.position_free, a.position_aware,
                    static_cast<double>(r.peak_pages * r.page_bytes) / (1 << 20));
        std::fflush(stdout);
        j.open();
        j.field("mode", std::string(to_string(mode))).field("rate", rate);
        write_summary(j, s, r, a);
        j.field("budget_docs", budget_docs)
            .field("top_c_hit_ratio_same_draws_at_budget", ideal_at_budget);
        if (cpu) j.field("fp8_saturated", cpu->fp8_saturated());
#if LAZYATTN_RAG_CUDA
        if (gpu) j.field("fp8_saturated", gpu->fp8_saturated());
#endif
        write_requests(j, r);
        j.close();
      }
    }
  }
  j.close(']').close();
  json << '\n';
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << json.str();
    if (!f) {
      std::fprintf(stderr, "lazyattn_rag_bench: cannot write %s\n", o.out.c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", o.out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const lazyattn::Error& e) {
    std::fprintf(stderr, "lazyattn_rag_bench: %s\n", e.what());
    return 1;
  }
}
