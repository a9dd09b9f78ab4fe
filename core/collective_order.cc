#include "core/collective_order.h"

#include <sstream>

#include "core/command_facts.h"

namespace thunky {

namespace {

std::string sig_text(const Program& p, const CollectiveSig& g) {
  return collective_signature(p, *g.cmd, g.src, g.dst, g.n);
}

bool same_sig(const Program& p, const CollectiveSig& a, const CollectiveSig& b) {
  if (a.cmd == b.cmd && a.src.shape == b.src.shape && a.dst.shape == b.dst.shape) return true;
  return sig_text(p, a) == sig_text(p, b);
}

}  // namespace

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

// Every member of a communicator must issue the same collective sequence;
// the first communicator where two differ is a deadlock.
std::optional<Diagnostic> collective_order(const Program& p, const CollectiveSequences& comm_seqs) {
  for (const auto& [comm, seqs] : comm_seqs) {
    std::vector<int64_t> members(comm.begin(), comm.end());
    std::map<int64_t, const std::vector<CollectiveSig>*> by_rank;
    for (const auto& [r, s] : seqs) by_rank[r] = &s;
    const int64_t ref_rank = members.front();
    auto ref_it = by_rank.find(ref_rank);
    static const std::vector<CollectiveSig> empty;
    const auto& ref = ref_it == by_rank.end() ? empty : *ref_it->second;
    for (int64_t m : members) {
      auto it = by_rank.find(m);
      const auto& mine = it == by_rank.end() ? empty : *it->second;
      size_t k = 0;
      while (k < ref.size() && k < mine.size() && same_sig(p, ref[k], mine[k])) ++k;
      if (k == ref.size() && k == mine.size()) continue;
      std::ostringstream msg;
      msg << "deadlock: ranks " << ref_rank << " and " << m << " of communicator {" << rank_list(members)
          << "} issue different collective sequences; collective #" << k << ": rank " << ref_rank << " "
          << (k < ref.size() ? ref[k].cmd->id() + " " + sig_text(p, ref[k]) : std::string("issues none")) << ", rank " << m << " "
          << (k < mine.size() ? mine[k].cmd->id() + " " + sig_text(p, mine[k]) : std::string("issues none"));
      const Command* at = k < mine.size() ? mine[k].cmd : ref[k].cmd;
      return Diagnostic{ErrorKind::schedule, p.file, at->id(), msg.str()};
    }
  }
  return std::nullopt;
}

}  // namespace thunky
