#include "exec/workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

namespace thunky {
namespace {

// Three jobs that each wait until all three have started: they finish only
// if every job has a thread of its own at once (a stream's thread may wait
// for another stream of the same rank).
void run_three_that_meet(Workers& workers, std::atomic<int>& finished) {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  auto meet = [&] {
    std::unique_lock<std::mutex> l(mu);
    ++arrived;
    cv.notify_all();
    if (cv.wait_for(l, std::chrono::seconds(20), [&] { return arrived == 3; })) ++finished;
  };
  Workers::Worker* a = workers.start(meet);
  Workers::Worker* b = workers.start(meet);
  Workers::Worker* c = workers.start(meet);
  workers.wait(a);
  workers.wait(b);
  workers.wait(c);
}

TEST(Workers, JobsStartedTogetherRunTogetherAndTheirThreadsAreKept) {
  Workers workers;
  std::atomic<int> finished = 0;
  for (int round = 0; round < 5; ++round) run_three_that_meet(workers, finished);
  // 5 rounds x 3 jobs, each of which met the other two of its round.
  EXPECT_EQ(finished.load(), 15);
  // The first round made three threads; the next four reused them.
  EXPECT_EQ(workers.size(), 3u);
}

TEST(Workers, WhatAJobHoldsIsReleasedWhenItIsWaitedFor) {
  Workers workers;
  auto held = std::make_shared<int>(7);
  int seen = 0;
  Workers::Worker* w = workers.start([held, &seen] { seen = *held; });
  workers.wait(w);
  EXPECT_EQ(seen, 7);
  // Only this test's copy is left: the worker dropped the job's.
  EXPECT_EQ(held.use_count(), 1);
}

}  // namespace
}  // namespace thunky
