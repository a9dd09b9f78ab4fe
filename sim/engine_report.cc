// The report: the compact records turned into the timeline, the
// collective table and the link samples.
#include "sim/engine_internal.h"

namespace thunky::sim::internal {

std::string Engine::op_id(int info, int32_t inst) const {
  const std::string& id = infos_[info].cmd->id();
  return inst >= 0 ? id + "#" + std::to_string(inst) : id;
}

Report Engine::report_header() const {
  Report r;
  r.source = "sim";
  r.schedule = p_.name.empty() ? p_.file : p_.name;
  r.machine = m_.name;
  if (m_.host_cores > 0) r.host_cores = m_.host_cores;  // a model of a CPU host (thunky-compare tells it from a device model)
  r.axis_names = p_.mesh.axis_names;
  r.mesh_shape = p_.mesh.shape;
  return r;
}

SimResult Engine::stats_result() {
  SimResult r;
  r.classes = classes_;
  r.report = report_header();
  for (int64_t rank = 0; rank < p_.mesh.size(); ++rank) {
    RankReport rr;
    rr.rank = rank;
    rr.coords = ctx(rank).coords;
    if (!simulated(rank)) {
      rr.same_as = representative(rank);
    } else {
      rr.stats = recorder_.tally(rank).stats();
      r.report.makespan_s = std::max(r.report.makespan_s, recorder_.tally(rank).last_end_s());
    }
    r.report.ranks.push_back(std::move(rr));
  }
  summarize_stats(r.report);
  r.collectives = recorder_.take_rows();
  return r;
}

SimResult Engine::result() {
  SimResult r;
  r.classes = classes_;
  r.report = report_header();
  // Names are made once per stream and per command, not per op: every
  // rank and every run of a loop shares them.
  std::vector<Name> stream_names(streams_.size());
  for (size_t s = 0; s < streams_.size(); ++s) stream_names[s] = streams_[s].sid.str();
  struct CommandNames {
    Name id, op, name, algorithm, token;
  };
  std::vector<std::optional<CommandNames>> command_names(infos_.size());
  auto names_of = [&](int info) -> const CommandNames& {
    std::optional<CommandNames>& n = command_names[static_cast<size_t>(info)];
    if (!n) {
      const Command& c = *infos_[info].cmd;
      n = CommandNames{c.id(), op_name(c.op()), c.name, algorithm_at(info), async_token(c)};
    }
    return *n;
  };
  Work scratch;
  const int64_t n = p_.mesh.size();
  for (int64_t rank = 0; rank < n; ++rank) {
    RankReport rr;
    rr.rank = rank;
    rr.coords = ctx(rank).coords;
    // Folded, a representative's records are its class's: the others say so.
    if (!simulated(rank)) {
      rr.same_as = representative(rank);
      r.report.ranks.push_back(std::move(rr));
      continue;
    }
    const int64_t from = rank;
    auto& recs = recorder_.records(from);
    auto by_start = [](const Rec& a, const Rec& b) { return a.start < b.start; };
    if (!std::is_sorted(recs.begin(), recs.end(), by_start)) std::stable_sort(recs.begin(), recs.end(), by_start);
    rr.ops.reserve(recs.size());
    for (const Rec& rec : recs) {
      const CommandNames& names = names_of(rec.info);
      const Work& w = work(rec.info, rank, scratch);
      const Name id = rec.instance >= 0 ? Name(op_id(rec.info, rec.instance)) : names.id;
      rr.ops.push_back({id, names.op, names.name, stream_names[rec.stream], rec.start, rec.end, w.bytes, w.flops});
      rr.ops.back().algorithm = names.algorithm;
      if (rec.transfer >= 0) rr.ops.back().transfer_start_s = rec.transfer;
      rr.ops.back().interference_s = rec.lost;
    }
    for (const Edge& e : recorder_.edges(from))
      rr.flows.push_back({stream_names[e.from_stream], stream_names[e.to_stream], e.from_s, e.to_s, names_of(e.info).token, e.join});
    std::vector<Rec>().swap(recs);  // each rank's records are read once
    std::vector<Edge>().swap(recorder_.edges(from));
    r.report.ranks.push_back(std::move(rr));
  }
  summarize(r.report);
  // Folded, each link class stands for its link at every rank of its
  // representative's class.
  std::vector<std::vector<int64_t>> class_of;  // representative -> the ranks of its class
  if (fold_) {
    class_of.resize(static_cast<size_t>(n));
    for (int64_t rank = 0; rank < n; ++rank) class_of[static_cast<size_t>(representative(rank))].push_back(rank);
  }
  std::vector<std::tuple<std::string, uint64_t, int>> names;  // name, key, series
  for (size_t l = 0; l < network_.links(); ++l) {
    const uint64_t key = network_.key(LinkId(l));
    if (!fold_) {
      names.emplace_back(LinkKey::name(key), key, static_cast<int>(l));
      continue;
    }
    const auto kind = key >> 60;
    const int64_t rep = static_cast<int64_t>(kind == LinkKey::ingress || kind == LinkKey::nic_in ? key & 0x3fffffff : (key >> 30) & 0x3fffffff);
    for (int64_t rank : class_of[static_cast<size_t>(rep)]) {
      const uint64_t real = link_at(key, rank);
      names.emplace_back(LinkKey::name(real), real, static_cast<int>(l));
    }
  }
  std::sort(names.begin(), names.end());
  for (auto& [name, key, id] : names) {
    LinkSeries ls;
    ls.rank = static_cast<int64_t>((key >> 60) == LinkKey::ingress ? key & 0x3fffffff : (key >> 30) & 0x3fffffff);
    ls.name = std::move(name);
    ls.samples.assign(network_.samples(LinkId(id)).begin(), network_.samples(LinkId(id)).end());
    r.report.links.push_back(std::move(ls));
  }
  r.collectives = recorder_.take_rows();
  return r;
}

CollectiveCost& Engine::algorithm_of(int info) {
  if (algorithms_.size() <= static_cast<size_t>(info)) algorithms_.resize(infos_.size());
  return algorithms_[static_cast<size_t>(info)];
}

std::string Engine::algorithm_at(int info) const {
  return static_cast<size_t>(info) < algorithms_.size() ? algorithms_[static_cast<size_t>(info)].algorithm() : std::string();
}

}  // namespace thunky::sim::internal
