// Collectives behind one interface. The in-process implementation serves
// the CPU backend and the tests: every rank is a thread of one process and
// a collective is a rendezvous of its participants.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "exec/monitor.h"

namespace thunky {

// One collective as issued by one rank.
struct CollectiveCall {
  Op op = Op::all_reduce;
  std::string reduction = "sum";
  DType dtype = DType::f32;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t src_count = 0, dst_count = 0;
  std::vector<int> ranks;  // participants, in collective order
  int position = 0;        // this rank's index among them
  std::vector<std::pair<int64_t, int64_t>> pairs;  // collective_permute, by position
  std::string id;          // command id, for messages
  std::string signature;   // what must match across ranks
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Runs the collectives `rank` issues as one launch (a collective_group or
  // a single collective) with the ranks `members` (launch_members); blocks
  // until every member has joined and the data has moved. Throws Aborted
  // when the run is aborted (deadlock, mismatch) while waiting.
  virtual void run(int rank, std::vector<CollectiveCall>& group, const std::vector<int>& members, const std::string& waiter) = 0;
};

// Exact in-process collectives for ranks that share one address space.
std::unique_ptr<Communicator> make_inprocess_communicator(Monitor& monitor, int ranks);

// The element-level semantics of each collective, shared by every
// transport: given every participant's staged src, produce `dst` of the
// participant at `position`.
void collective_result(const CollectiveCall& mine, const std::vector<const uint8_t*>& staged_src, uint8_t* dst);

}  // namespace thunky
