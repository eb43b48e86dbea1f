// The thread pool behind parallel_for: every index exactly once, for any thread count and
// grain; concurrent and nested callers; and a caller is not held up by a worker that cannot run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/threads.h"

using namespace nemo;

namespace {

// Counts how often each index of [0, n) was visited.
std::vector<int> visits(int threads, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
  parallel_for(ThreadConfig{threads}, n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LT(b, e);
    for (int64_t i = b; i < e; ++i) hit[size_t(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (auto& h : hit) out.push_back(h.load());
  return out;
}

}  // namespace

TEST(Threads, EveryIndexExactlyOnce) {
  int checked = 0;
  for (int threads : {1, 2, 3, 4, 8})
    for (int64_t n : {1, 2, 7, 64, 1000, 100000})
      for (int64_t grain : {1, 16, 5000}) {
        const auto v = visits(threads, n, grain);
        ASSERT_EQ(int64_t(v.size()), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(v[size_t(i)], 1) << threads << " " << n << " " << grain << " " << i;
        ++checked;
      }
  EXPECT_EQ(checked, 5 * 6 * 3);
}

TEST(Threads, UsesMoreThanOneThread) {
  std::atomic<int> inside{0}, most{0};
  parallel_for(ThreadConfig{2}, 64, 1, [&](int64_t, int64_t) {
    const int now = inside.fetch_add(1) + 1;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    inside.fetch_sub(1);
  });
  EXPECT_EQ(most.load(), 2);
}

TEST(Threads, ConcurrentAndNestedCallers) {
  std::atomic<int64_t> sum{0};
  auto job = [&] {
    for (int rep = 0; rep < 200; ++rep)
      parallel_for(ThreadConfig{2}, 100, 1, [&](int64_t b, int64_t e) {
        // Nested: runs inline on whichever thread got here.
        parallel_for(ThreadConfig{2}, e - b, 1,
                     [&](int64_t b2, int64_t e2) { sum.fetch_add(e2 - b2); });
      });
  };
  std::thread a(job), b(job);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 2 * 200 * 100);
}

// A worker that the OS does not schedule must not hold the caller up: the caller takes its
// chunks and returns. Holding the workers models that; a fork/join barrier would hang here.
TEST(Threads, CallerDoesNotWaitForWorkersThatNeverRun) {
  parallel_for(ThreadConfig{2}, 8, 1, [](int64_t, int64_t) {});  // the pool has its worker
  ThreadPool::instance().hold_workers(true);
  const auto me = std::this_thread::get_id();
  std::atomic<int64_t> by_caller{0}, total{0};
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(ThreadConfig{2}, 1000, 1, [&](int64_t b, int64_t e) {
    total += e - b;
    if (std::this_thread::get_id() == me) by_caller += e - b;
  });
  ThreadPool::instance().hold_workers(false);
  EXPECT_EQ(total.load(), 1000);
  EXPECT_EQ(by_caller.load(), 1000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // Released workers join the next job again.
  std::atomic<int> others{0};
  for (int rep = 0; rep < 50 && others.load() == 0; ++rep)
    parallel_for(ThreadConfig{2}, 64, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != me) others.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
  EXPECT_GT(others.load(), 0);
}
