// Thread fan-out. Work is always split over *independent outputs* (never over a reduction),
// so results are bitwise independent of the thread count and of which thread ran which part.
//
// parallel_for cuts [0, n) into a few chunks per thread that the caller and the pool's workers
// claim one at a time. The caller returns as soon as every chunk is done: a worker that the OS
// has not scheduled (a busy machine) holds nothing up, because its chunks are taken by whoever
// runs. Idle workers spin briefly, then sleep on a futex (no CPU burnt between requests).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace nemo {

struct ThreadConfig {
  int n_threads = 1;
};

int default_thread_count();  // physical cores available to this process

// The workers behind parallel_for. One per process (threads are a process resource), created on
// first use and grown to the largest thread count asked for.
class ThreadPool {
 public:
  using ChunkFn = void (*)(void* ctx, int64_t chunk);

  static ThreadPool& instance();
  ~ThreadPool();

  // Runs fn(ctx, c) for every c in [0, n_chunks) on the caller and up to n_threads - 1 workers.
  // A call made while another is running (another thread, or from inside fn) runs inline.
  void run(int n_threads, int64_t n_chunks, ChunkFn fn, void* ctx);

  // Tests: while held, workers take no new job (as if the OS never scheduled them).
  void hold_workers(bool hold) { hold_.store(hold); }

 private:
  ThreadPool() = default;
  void grow(int n_workers);
  void worker_loop();
  void work_on(uint64_t job);

  // job word: id (32 bits) | chunks claimed so far (16) | chunk count (16). A claim is a CAS that
  // bumps the middle field, so a late worker can only ever take a chunk of the job it saw.
  std::atomic<uint64_t> job_{0};
  std::atomic<int64_t> done_{0};  // chunks finished in the current job
  std::atomic<int> seats_{0};     // workers still allowed to join the current job
  std::atomic<int> sleepers_{0};
  std::atomic<bool> busy_{false}, stop_{false}, hold_{false};
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::vector<std::thread> workers_;
};

// Calls fn(begin, end) on contiguous blocks of [0, n); blocks are at least `grain` long.
template <typename Fn>
void parallel_for(const ThreadConfig& tc, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int nt = tc.n_threads < 1 ? 1 : tc.n_threads;
  if (grain < 1) grain = 1;
  const int64_t max_blocks = (n + grain - 1) / grain;
  if (nt > max_blocks) nt = int(max_blocks);
  if (nt <= 1) {
    fn(int64_t(0), n);
    return;
  }
  // A few chunks per thread, so a late thread's share is spread over the others.
  const int64_t chunks = std::min<int64_t>(max_blocks, int64_t(nt) * 4);
  struct Ctx {
    std::remove_reference_t<Fn>* fn;
    int64_t n, chunks;
  } ctx{&fn, n, chunks};
  ThreadPool::instance().run(
      nt, chunks,
      [](void* p, int64_t c) {
        const auto* x = static_cast<Ctx*>(p);
        const int64_t b = x->n * c / x->chunks, e = x->n * (c + 1) / x->chunks;
        if (b < e) (*x->fn)(b, e);
      },
      &ctx);
}

}  // namespace nemo
