// NCCL ids across processes: the logic that passes a unique id from the
// first member of each member set to the others, with the launch's
// processes played by two objects in memory (no GPU, no MPI).
#include "exec/cuda/loopback.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <thread>
#include <tuple>

namespace thunky::cuda {
namespace {

// Messages between fake processes, by (key, from, to).
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<uint64_t, int, int>, std::vector<uint8_t>> box;
  int exchanges = 0;
};

class FakeProcesses final : public Processes {
 public:
  FakeProcesses(Mailbox& m, int index, int count) : m_(m) { place_.index = index, place_.count = count; }
  const ProcessPlace& place() const override { return place_; }
  std::vector<std::vector<uint8_t>> exchange(uint64_t key, const std::vector<uint8_t>& mine, const std::vector<int>& peers, double,
                                             const std::function<void()>&) override {
    std::unique_lock<std::mutex> l(m_.mu);
    ++m_.exchanges;
    for (int q : peers) m_.box[{key, place_.index, q}] = mine;
    m_.cv.notify_all();
    std::vector<std::vector<uint8_t>> got;
    for (int q : peers) {
      m_.cv.wait(l, [&] { return m_.box.count({key, q, place_.index}) > 0; });
      got.push_back(m_.box[{key, q, place_.index}]);
      m_.box.erase({key, q, place_.index});
    }
    return got;
  }
  std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>&) override { return {}; }
  double max(double mine) override { return mine; }
  void barrier() override {}
  void fail(const std::string&, int) override {}
  std::optional<ProcessStop> failure() override { return std::nullopt; }

 private:
  Mailbox& m_;
  ProcessPlace place_;
};

TEST(NcclIds, AcrossProcessesEveryMemberGetsItsFirstMembersId) {
  // Ranks 0 1 run in process 0, ranks 2 3 in process 1. The sets come in
  // one order on every rank; {0, 1} and {0, 1, 2, 3} look alike from
  // process 0 (its members are 0 and 1 in both), and {1, 2, 3} is led by a
  // member that is not rank 0. Every member must end with the id that the
  // set's first member made ("id of set k"), never another set's.
  const std::vector<std::vector<int>> sets = {{0, 1, 2, 3}, {0, 2}, {1, 3}, {0, 1}, {2, 3}, {1, 2, 3}, {0, 1, 2, 3}};
  Mailbox mail;
  FakeProcesses p0(mail, 0, 2), p1(mail, 1, 2);
  auto ids0 = make_process_id_exchange(p0, 4, 0), ids1 = make_process_id_exchange(p1, 4, 0);
  std::vector<std::vector<std::string>> got(4);  // by rank, one per set it is in
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 4; ++rank)
    ranks.emplace_back([&, rank] {
      IdExchange& ids = rank < 2 ? *ids0 : *ids1;
      for (size_t k = 0; k < sets.size(); ++k) {
        const auto& m = sets[k];
        const auto it = std::find(m.begin(), m.end(), rank);
        if (it == m.end()) continue;
        const int position = static_cast<int>(it - m.begin());
        std::vector<char> bytes(32, 0);
        if (position == 0) std::snprintf(bytes.data(), bytes.size(), "id of set %zu", k);
        ids.exchange(m, position, bytes);
        got[static_cast<size_t>(rank)].emplace_back(bytes.data());
      }
    });
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 4; ++rank) {
    std::vector<std::string> want;
    for (size_t k = 0; k < sets.size(); ++k)
      if (std::find(sets[k].begin(), sets[k].end(), rank) != sets[k].end()) want.push_back("id of set " + std::to_string(k));
    EXPECT_EQ(got[static_cast<size_t>(rank)], want) << "rank " << rank;
  }
  // Only sets that span both processes go between them, once a process
  // each: {0,1,2,3} twice, {0,2}, {1,3}, {1,2,3}: 5 sets x 2 processes.
  EXPECT_EQ(mail.exchanges, 10);
  EXPECT_TRUE(mail.box.empty());
}

}  // namespace
}  // namespace thunky::cuda
