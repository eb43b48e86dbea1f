#include "base/threads.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

#include "base/error.h"

namespace nemo {

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

namespace {
constexpr uint64_t kIdShift = 32, kClaimShift = 16, kField = 0xFFFF;
uint64_t claimed(uint64_t j) {
  return (j >> kClaimShift) & kField;
}
uint64_t count(uint64_t j) {
  return j & kField;
}
// How long an idle worker polls before sleeping: long enough to span the serial gaps between
// the parallel loops of one forward pass, short enough not to matter to a neighbour.
constexpr auto kSpin = std::chrono::microseconds(200);
}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  job_.fetch_add(uint64_t(1) << kIdShift);  // a new value for sleepers to wake on
  job_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::grow(int n_workers) {
  while (int(workers_.size()) < n_workers) workers_.emplace_back([this] { worker_loop(); });
}

// Claims and runs chunks of `job` until none is left or the job word moves on to another job.
void ThreadPool::work_on(uint64_t job) {
  const uint64_t id = job >> kIdShift;
  for (;;) {
    if (claimed(job) >= count(job)) return;
    if (!job_.compare_exchange_weak(job, job + (uint64_t(1) << kClaimShift),
                                    std::memory_order_acq_rel)) {
      if ((job >> kIdShift) != id) return;  // a newer job: the worker loop takes a seat first
      continue;
    }
    fn_(ctx_, int64_t(claimed(job)));
    done_.fetch_add(1, std::memory_order_release);
    job += uint64_t(1) << kClaimShift;
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t j = job_.load(std::memory_order_acquire);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; (j >> kIdShift) == (seen >> kIdShift); ++i) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() - t0 > kSpin) {
        sleepers_.fetch_add(1);
        job_.wait(j);
        sleepers_.fetch_sub(1);
      } else {
        _mm_pause();
      }
      j = job_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_relaxed)) return;
    seen = j;
    if (hold_.load(std::memory_order_relaxed)) continue;
    if (seats_.fetch_sub(1, std::memory_order_acq_rel) > 0) work_on(j);
  }
}

void ThreadPool::run(int n_threads, int64_t n_chunks, ChunkFn fn, void* ctx) {
  NEMO_CHECK(n_chunks >= 0 && uint64_t(n_chunks) <= kField, "ThreadPool: {} chunks", n_chunks);
  bool expected = false;
  if (n_threads <= 1 || !busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    for (int64_t c = 0; c < n_chunks; ++c) fn(ctx, c);
    return;
  }
  grow(n_threads - 1);
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  seats_.store(n_threads - 1, std::memory_order_relaxed);
  // The release store publishes fn_, ctx_, done_ and seats_ with the new job word.
  const uint64_t id = ((job_.load(std::memory_order_relaxed) >> kIdShift) + 1) & 0xFFFFFFFF;
  const uint64_t job = ((id ? id : 1) << kIdShift) | uint64_t(n_chunks);
  job_.store(job, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) job_.notify_all();
  work_on(job);
  // Chunks still running on workers: wait for them (each is a short, already-started piece).
  for (int i = 0; done_.load(std::memory_order_acquire) < n_chunks; ++i) {
    if (i < 4096)
      _mm_pause();
    else
      std::this_thread::yield();
  }
  busy_.store(false, std::memory_order_release);
}

}  // namespace nemo
