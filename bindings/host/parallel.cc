// The host ops' thread pool (parallel.h). One per module (each .so links its own copy): idle
// workers sleep on a condition variable, so the copies cost nothing between calls.
#include "host/parallel.h"

#include <pthread.h>
#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace xkernels::host {
namespace {

// Ranges per thread a call is cut into: a thread that starts late (its core busy with other
// work) leaves its share to the others instead of holding up the call.
constexpr int64_t kRangesPerThread = 16;

// How long a worker that finished a call, and a caller waiting for its workers, spin before they
// sleep. Waking a sleeping thread costs 10-40 us under KVM (the idle vCPU halts), more than many
// calls take; calls made back to back (a model's layers, a benchmark) find the workers spinning.
// libgomp, behind PyTorch's CPU ops, spins for longer by default.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or kSpin has passed; returns done(). Yields now and then: when the thread it
// waits for shares its CPU (the other CPUs busy with other work), that thread then runs.
template <class F>
bool SpinUntil(F done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
    std::this_thread::yield();
  }
}

class Pool {
 public:
  // spin: whether idle workers spin before they sleep (not when there are more threads than CPUs:
  // a spinning worker would take a core from a working one).
  Pool(int workers, bool spin) : spin_(spin) {
    threads_.reserve(workers);
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      call_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Ranges [i * size, (i + 1) * size) of [0, n) through fn, on the caller and up to `helpers`
  // workers. False, with nothing run, when another call holds the pool.
  bool Run(int64_t n, int64_t size, RangeFn fn, const void* ctx, int helpers) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    helpers = std::min<int>(helpers, static_cast<int>(threads_.size()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      size_ = size;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = helpers;
      joined_ = 0;
      open_ = true;
      call_.fetch_add(1, std::memory_order_release);
    }
    // Wakes the sleeping workers (no system call when all of them are spinning).
    if (helpers == static_cast<int>(threads_.size())) {
      wake_.notify_all();
    } else {
      for (int i = 0; i < helpers; ++i) wake_.notify_one();
    }
    Claim();
    // Close the call (a worker that comes from now on goes back to waiting) and wait for the
    // workers still inside a range: their writes are visible once running_ reads 0.
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = false;
    }
    if (!SpinUntil([this] { return running_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [this] { return running_.load(std::memory_order_acquire) == 0; });
    }
    return true;
  }

 private:
  void Work() {
    uint64_t seen = 0;
    for (;;) {
      if (spin_) SpinUntil([&] { return call_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] {
        return stop_ ||
               (call_.load(std::memory_order_relaxed) != seen && (!open_ || joined_ < helpers_));
      });
      if (stop_) return;
      seen = call_.load(std::memory_order_relaxed);
      if (!open_ || joined_ >= helpers_) continue;  // closed, or enough workers: wait for the next
      ++joined_;
      running_.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      Claim();
      lock.lock();
      if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_.notify_one();
    }
  }

  // Runs ranges until none is left. fn_, ctx_, n_, size_ were set under mu_ before the call opened.
  void Claim() {
    for (;;) {
      const int64_t begin = next_.fetch_add(1, std::memory_order_relaxed) * size_;
      if (begin >= n_) return;
      fn_(ctx_, begin, std::min(n_, begin + size_));
    }
  }

  const bool spin_;
  std::mutex busy_;  // held by the caller of the open call
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  bool stop_ = false, open_ = false;  // under mu_
  int helpers_ = 0, joined_ = 0;      // under mu_
  std::atomic<uint64_t> call_{0};     // changes (under mu_) when a call opens
  std::atomic<int> running_{0};       // workers inside the open call (changed under mu_)
  RangeFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0, size_ = 1;
  std::atomic<int64_t> next_{0};  // the next range to claim
  std::vector<std::thread> threads_;
};

std::mutex g_mu;  // creates the pool
std::atomic<Pool*> g_pool{nullptr};

// In a forked child the parent's workers do not exist: leave their pool (leaked) and start anew.
void ForkChild() { g_pool.store(nullptr, std::memory_order_relaxed); }

// Stops and joins the workers when the module is unloaded or the process exits.
struct Reaper {
  ~Reaper() { delete g_pool.exchange(nullptr); }
} g_reaper;

int AffinityCpus();

Pool* GetPool(int workers) {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  std::lock_guard<std::mutex> lock(g_mu);
  static const bool registered = pthread_atfork(nullptr, nullptr, ForkChild) == 0;
  (void)registered;
  p = g_pool.load(std::memory_order_relaxed);
  if (p == nullptr) {
    p = new Pool(workers, workers < AffinityCpus());
    g_pool.store(p, std::memory_order_release);
  }
  return p;
}

int AffinityCpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int ReadThreads() {
  if (const char* s = std::getenv("XKERNELS_HOST_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end != s && *end == '\0' && v >= 1) return static_cast<int>(std::min(v, 1024L));
  }
  return AffinityCpus();
}

}  // namespace

int HostThreads() {
  static const int threads = ReadThreads();
  return threads;
}

void ParallelFor(int64_t n, int64_t grain, RangeFn fn, const void* ctx) {
  const int threads = HostThreads();
  const int64_t most = n / std::max<int64_t>(grain, 1);  // ranges of at least `grain` items
  const int use = static_cast<int>(std::min<int64_t>(threads, most));
  if (use <= 1) {
    if (n > 0) fn(ctx, 0, n);
    return;
  }
  const int64_t ranges = std::min<int64_t>(most, kRangesPerThread * use);
  const int64_t size = (n + ranges - 1) / ranges;
  if (!GetPool(threads - 1)->Run(n, size, fn, ctx, use - 1)) fn(ctx, 0, n);
}

}  // namespace xkernels::host
