// Threads for the host ops: ranges of rows (or of row blocks) over a persistent pool.
//
// The pool holds HostThreads() - 1 workers, started on the first call big enough to use them; the
// caller's thread takes ranges too. Ranges are claimed in turn from a shared counter (cores shared
// with other work finish unevenly), so an op must compute every item on its own: then the result
// is the same bits whichever thread runs a range, and for any thread count. Calls below the grain
// run on the caller's thread and never touch the pool; so does a call made while the pool is busy
// with another caller's call (no queueing, no deadlock), and one made in a forked child runs on a
// new pool (the parent's threads are not there).
#ifndef XKERNELS_BINDINGS_HOST_PARALLEL_H_
#define XKERNELS_BINDINGS_HOST_PARALLEL_H_

#include <cstdint>

namespace xkernels::host {

// Elements (read plus written) below which a thread is not worth waking: on an EPYC (Zen 4) under
// KVM a wake-up and the join cost 10-30 us, the time to stream ~64K elements of the cheaper ops.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 16;
// Multiply-adds of the vectorized products (host attention and GEMM) costing about an element of
// the above: ParallelFor's `work` for items of m multiply-adds is m / kMacsPerElement.
constexpr int64_t kMacsPerElement = 16;

// The threads the host ops use, the caller's included: XKERNELS_HOST_THREADS when set to a number
// >= 1, else the CPUs this process may run on (sched_getaffinity). Read once.
int HostThreads();

using RangeFn = void (*)(const void* ctx, int64_t begin, int64_t end);

// fn(ctx, begin, end) over ranges that cover [0, n) once; each range but the last has at least
// `grain` items. Returns when every range has run.
void ParallelFor(int64_t n, int64_t grain, RangeFn fn, const void* ctx);

// f(begin, end) as above, for items that each cost about `work` elements.
template <class F>
void ParallelFor(int64_t n, int64_t work, const F& f) {
  const int64_t grain = work >= kMinWorkPerThread ? 1 : kMinWorkPerThread / (work > 0 ? work : 1);
  if (n <= grain) {  // one thread's worth: no pool
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  ParallelFor(
      n, grain, [](const void* c, int64_t b, int64_t e) { (*static_cast<const F*>(c))(b, e); }, &f);
}

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_PARALLEL_H_
