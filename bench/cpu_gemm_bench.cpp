// Stand-alone benchmark program (own main): Trident's CPU sgemm against OpenBLAS's cblas_sgemm
// (loaded at run time from libopenblas.so.0) on square sizes and the seed models' GEMM shapes.
//
// Usage: cpu_gemm_bench [--threads N] [--kernel generic|avx2|avx512] [--no-openblas] [--quick]
// Both libraries run in the same process, alternately, with a pause between them so that neither
// one's idle worker threads (OpenBLAS spins for a while after each call) steal the other's cores.
#include <dlfcn.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trident/kernels/cpu/gemm.h"

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
};

// Square sizes, then the seed MLP (784-512-10, batch 200) forward and backward GEMMs, then the
// CNN's im2col GEMMs (20 filters of 10x5x5 over 8x8 outputs, batch 64).
const Shape kShapes[] = {
    {"square 256", false, false, 256, 256, 256},      {"square 512", false, false, 512, 512, 512},
    {"square 1024", false, false, 1024, 1024, 1024},  {"square 2048", false, false, 2048, 2048, 2048},
    {"mlp fc1 fwd  X W^T", false, true, 200, 512, 784}, {"mlp fc2 fwd  H W^T", false, true, 200, 10, 512},
    {"mlp fc1 dX   dY W", false, false, 200, 784, 512},  {"mlp fc1 dW   dY^T X", true, false, 512, 784, 200},
    {"mlp fc1 dW^T X^T dY", true, false, 784, 512, 200}, {"mlp fc2 dW   dY^T H", true, false, 10, 512, 200},
    {"mlp fc2 dX   dY W", false, false, 200, 512, 10},   {"cnn conv fwd W col", false, false, 20, 4096, 250},
    {"cnn conv dW  dY col^T", false, true, 20, 250, 4096}, {"cnn conv dcol W^T dY", true, false, 250, 4096, 20},
};

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                            float, float*, int);

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best GFLOP/s over `rounds` batches of `reps` calls each.
double best_gflops(const std::function<void()>& call, double flops, int reps) {
  const double t0 = now();
  for (int r = 0; r < reps; ++r) call();
  return flops * reps / (now() - t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  bool with_openblas = true, quick = false;
  const trident::cpu::detail::KernelSet* ks = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--no-openblas") with_openblas = false;
    else if (a == "--quick") quick = true;
    else if (a == "--kernel" && i + 1 < argc) {
      const std::string k = argv[++i];
      namespace d = trident::cpu::detail;
      ks = k == "generic" ? d::kernels_generic() : k == "avx2" ? d::kernels_avx2() : d::kernels_avx512();
      if (!ks) return std::fprintf(stderr, "kernel %s not built\n", k.c_str()), 1;
    } else {
      return std::fprintf(stderr, "usage: %s [--threads N] [--kernel generic|avx2|avx512] [--no-openblas] [--quick]\n", argv[0]), 1;
    }
  }
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));

  CblasSgemm cblas = nullptr;
  if (with_openblas) {
    void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      cblas = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
      if (auto set = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"))) set(threads);
      auto core = reinterpret_cast<const char* (*)()>(dlsym(lib, "openblas_get_corename"));
      std::printf("OpenBLAS: libopenblas.so.0, core %s\n", core ? core() : "?");
    } else {
      std::printf("OpenBLAS: not found (%s)\n", dlerror());
    }
  }
  std::printf("Trident kernel: %s, threads: %d\n\n", ks ? ks->name : trident::cpu::sgemm_kernel_name(), threads);
  std::printf("%-22s %2s %5s %5s %5s | %8s %8s | %6s\n", "shape", "op", "M", "N", "K", "Trident", "OpenBLAS",
              "ratio");

  const int rounds = quick ? 2 : 5;
  const double batch_s = quick ? 0.03 : 0.08;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Shape& s : kShapes) {
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N));
    for (auto& x : A) x = dist(rng);
    for (auto& x : B) x = dist(rng);
    const double flops = 2.0 * s.M * s.N * s.K;
    auto trident = [&] {
      if (ks)
        trident::cpu::detail::sgemm_with(*ks, s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb,
                                         0.f, C.data(), s.N, {});
      else
        trident::cpu::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), s.N);
    };
    auto openblas = [&] {
      cblas(101, s.ta ? 112 : 111, s.tb ? 112 : 111, int(s.M), int(s.N), int(s.K), 1.f, A.data(), int(lda),
            B.data(), int(ldb), 0.f, C.data(), int(s.N));
    };
    // Calls per batch so that a batch lasts about batch_s (from one warm-up call's time).
    trident();
    double t0 = now();
    trident();
    const int reps = std::max(1, int(batch_s / std::max(now() - t0, 1e-7)));
    double best_t = 0, best_o = 0;
    for (int r = 0; r < rounds; ++r) {
      best_t = std::max(best_t, best_gflops(trident, flops, reps));
      if (!cblas) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      if (r == 0) openblas();  // warm-up
      best_o = std::max(best_o, best_gflops(openblas, flops, reps));
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    const char op[3] = {s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', 0};
    if (cblas)
      std::printf("%-22s %2s %5ld %5ld %5ld | %8.1f %8.1f | %5.0f%%\n", s.name, op, long(s.M), long(s.N),
                  long(s.K), best_t, best_o, 100.0 * best_t / best_o);
    else
      std::printf("%-22s %2s %5ld %5ld %5ld | %8.1f %8s |\n", s.name, op, long(s.M), long(s.N), long(s.K),
                  best_t, "-");
    std::fflush(stdout);
  }
  return 0;
}
