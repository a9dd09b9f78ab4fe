#include "exec/cores.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace thunky {
namespace {

using namespace std::chrono_literals;

// Holds the pool's only core until released, so that later work queues.
struct Gate {
  std::atomic<bool> open{false}, entered{false};
  void hold() {
    entered = true;
    while (!open) std::this_thread::sleep_for(100us);
  }
};

TEST(CorePool, AtMostOneCommandACoreRunsAtOnce) {
  // 6 commands of 20 ms on 2 cores: never more than 2 at once.
  CorePool pool(2);
  EXPECT_EQ(pool.cores(), 2);
  std::atomic<int> running{0}, most{0};
  std::vector<std::thread> issuers;
  for (int i = 0; i < 6; ++i)
    issuers.emplace_back([&] {
      pool.run([&] {
        const int now = ++running;
        for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);) {
        }
        std::this_thread::sleep_for(20ms);
        --running;
      });
    });
  for (auto& t : issuers) t.join();
  EXPECT_EQ(most.load(), 2);
}

TEST(CorePool, WaitingCommandsGetTheCoreInTheOrderIssuedAndUrgentOnesFirst) {
  // One core held by a gate; then compute A, compute B, a collective C
  // (urgent) are issued, 20 ms apart. Once the gate opens they run C, A, B.
  CorePool pool(1);
  Gate gate;
  std::thread holder([&] { pool.run([&] { gate.hold(); }); });
  while (!gate.entered) std::this_thread::sleep_for(100us);
  std::vector<char> order;
  std::mutex mu;
  auto issue = [&](char name, bool urgent) {
    return std::thread([&, name, urgent] {
      pool.run([&] {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(name);
      }, urgent);
    });
  };
  std::thread a = issue('A', false);
  std::this_thread::sleep_for(20ms);
  std::thread b = issue('B', false);
  std::this_thread::sleep_for(20ms);
  std::thread c = issue('C', true);
  std::this_thread::sleep_for(20ms);
  gate.open = true;
  for (std::thread* t : {&holder, &a, &b, &c}) t->join();
  EXPECT_EQ(order, (std::vector<char>{'C', 'A', 'B'}));
}

TEST(CorePool, ACommandsSpanIsItsRunAndItsExceptionComesBack) {
  CorePool pool(1);
  const auto before = CorePool::Clock::now();
  const CorePool::Span s = pool.run([] { std::this_thread::sleep_for(10ms); });
  EXPECT_GE(s.start, before);
  EXPECT_GE(s.end - s.start, 10ms);
  EXPECT_THROW(pool.run([] { throw std::runtime_error("bad"); }), std::runtime_error);
  pool.run([] {});  // the core is free again
}

TEST(CorePool, TheDefaultIsTheCoresThisProcessMayUse) {
  const int cores = default_host_cores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace thunky
