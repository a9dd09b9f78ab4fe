#include "traces/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

namespace thunky {

using ojson = nlohmann::ordered_json;

bool is_collective_op(const std::string& op) {
  // Most ops are not collectives: their first letter says so at once.
  if (op.empty() || (op[0] != 'a' && op[0] != 'r' && op[0] != 'c')) return false;
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" || op == "collective_permute";
}

namespace {

using Interval = std::pair<double, double>;

std::vector<Interval> merged(std::vector<Interval> v) {
  // One stream's ops come in order already: checking is linear, sorting is not.
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

double length(const std::vector<Interval>& v) {
  double s = 0;
  for (const auto& iv : v) s += iv.second - iv.first;
  return s;
}

// Length of a minus its intersection with b (both merged).
double minus_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double s = 0;
  size_t j = 0;
  for (const auto& iv : a) {
    double cur = iv.first;
    while (j < b.size() && b[j].second <= cur) ++j;
    for (size_t k = j; k < b.size() && b[k].first < iv.second; ++k) {
      if (b[k].first > cur) s += b[k].first - cur;
      cur = std::max(cur, b[k].second);
      if (cur >= iv.second) break;
    }
    if (cur < iv.second) s += iv.second - cur;
  }
  return s;
}

}  // namespace

void summarize(Report& r) {
  r.makespan_s = 0;
  RankStats total;
  for (auto& rank : r.ranks) {
    std::vector<Interval> comp, comm;
    for (auto& op : rank.ops) {
      op.collective = is_collective_op(op.op);
      (op.collective ? comm : comp).emplace_back(op.start_s, op.end_s);
      r.makespan_s = std::max(r.makespan_s, op.end_s);
    }
    comp = merged(comp);
    comm = merged(comm);
    rank.stats.compute_s = length(comp);
    rank.stats.comm_s = length(comm);
    rank.stats.exposed_comm_s = minus_length(comm, comp);
    rank.stats.overlap_fraction = rank.stats.comm_s > 0 ? 1.0 - rank.stats.exposed_comm_s / rank.stats.comm_s : 0.0;
    total.compute_s += rank.stats.compute_s;
    total.comm_s += rank.stats.comm_s;
    total.exposed_comm_s += rank.stats.exposed_comm_s;
  }
  const double n = r.ranks.empty() ? 1.0 : static_cast<double>(r.ranks.size());
  r.summary.compute_s = total.compute_s / n;
  r.summary.comm_s = total.comm_s / n;
  r.summary.exposed_comm_s = total.exposed_comm_s / n;
  r.summary.overlap_fraction = r.summary.comm_s > 0 ? 1.0 - r.summary.exposed_comm_s / r.summary.comm_s : 0.0;
  // Critical path: from the op that ends last, step back each time to the
  // op of that rank that ended last no later than the current op started.
  r.critical_path.clear();
  const RankReport* best = nullptr;
  const OpRecord* cur = nullptr;
  for (const auto& rank : r.ranks)
    for (const auto& op : rank.ops)
      if (!cur || op.end_s > cur->end_s) {
        cur = &op;
        best = &rank;
      }
  if (!cur) return;
  // The rank's ops sorted by end time: each step back is a binary search.
  std::vector<const OpRecord*> by_end;
  by_end.reserve(best->ops.size());
  for (const auto& op : best->ops) by_end.push_back(&op);
  auto by_end_s = [](const OpRecord* a, const OpRecord* b) { return a->end_s < b->end_s; };
  // Stable, so that ops ending together keep their order either way.
  if (!std::is_sorted(by_end.begin(), by_end.end(), by_end_s)) std::stable_sort(by_end.begin(), by_end.end(), by_end_s);
  const double eps = 1e-12;
  while (cur && r.critical_path.size() < by_end.size()) {
    r.critical_path.push_back(cur->id);
    auto it = std::upper_bound(by_end.begin(), by_end.end(), cur->start_s + eps, [](double t, const OpRecord* op) { return t < op->end_s; });
    const OpRecord* prev = nullptr;
    while (it != by_end.begin()) {
      --it;
      if (*it != cur) {
        prev = *it;
        break;
      }
    }
    cur = prev;
  }
  std::reverse(r.critical_path.begin(), r.critical_path.end());
}

namespace {
ojson stats_json(const RankStats& s) {
  return ojson{{"compute_s", s.compute_s}, {"comm_s", s.comm_s}, {"exposed_comm_s", s.exposed_comm_s}, {"overlap_fraction", s.overlap_fraction}};
}
}  // namespace

namespace {

// JSON written as it goes, one value at a time: `first` says whether a
// comma is due before the next member or element.
class Writer {
 public:
  explicit Writer(std::ostream& os) : os_(os) {}
  void open(char c) {
    comma();
    os_ << c;
    first_ = true;
  }
  void close(char c) {
    os_ << c;
    first_ = false;
  }
  Writer& key(const char* k) {
    comma();
    os_ << '"' << k << "\":";
    first_ = true;  // the value follows without a comma
    return *this;
  }
  void value(const ojson& v) {
    comma();
    os_ << v.dump();
    first_ = false;
  }
  void member(const char* k, const ojson& v) { key(k).value(v); }

 private:
  void comma() {
    if (!first_) os_ << ',';
    first_ = false;
  }
  std::ostream& os_;
  bool first_ = true;
};

}  // namespace

namespace {

bool same_timeline(const RankReport& a, const RankReport& b) {
  auto same_op = [](const OpRecord& x, const OpRecord& y) {
    return x.start_s == y.start_s && x.end_s == y.end_s && x.id == y.id && x.op == y.op && x.name == y.name && x.stream == y.stream &&
           x.bytes == y.bytes && x.flops == y.flops && x.algorithm == y.algorithm;
  };
  auto same_flow = [](const FlowEdge& x, const FlowEdge& y) {
    return x.from_s == y.from_s && x.to_s == y.to_s && x.join == y.join && x.token == y.token && x.from_stream == y.from_stream &&
           x.to_stream == y.to_stream;
  };
  return std::equal(a.ops.begin(), a.ops.end(), b.ops.begin(), b.ops.end(), same_op) &&
         std::equal(a.flows.begin(), a.flows.end(), b.flows.begin(), b.flows.end(), same_flow);
}

}  // namespace

void write_report(const Report& r, std::ostream& os) {
  Writer w(os);
  w.open('{');
  w.member("format", "thunky.report/1");
  w.member("source", r.source);
  w.member("schedule", r.schedule);
  w.member("machine", r.machine ? ojson(*r.machine) : ojson());
  w.member("backend", r.backend ? ojson(*r.backend) : ojson());
  w.member("mesh", {{"axis_names", r.axis_names}, {"shape", r.mesh_shape}});
  w.member("makespan_s", r.makespan_s);
  w.key("ranks").open('[');
  for (const auto& rank : r.ranks) {
    w.open('{');
    w.member("rank", rank.rank);
    w.member("coords", rank.coords);
    // A rank with the first rank's timeline (SPMD, as thunky-sim folds it)
    // is written once, there.
    if (&rank != &r.ranks.front() && same_timeline(rank, r.ranks.front())) {
      w.member("same_as", r.ranks.front().rank);
      w.close('}');
      continue;
    }
    w.key("ops").open('[');
    for (const auto& op : rank.ops) {
      ojson o = {{"id", op.id}, {"op", op.op}, {"name", op.name}, {"stream", op.stream}, {"start_s", op.start_s},
                 {"end_s", op.end_s}, {"bytes", op.bytes}, {"flops", op.flops}};
      if (!op.algorithm.empty()) o["algorithm"] = op.algorithm;
      w.value(o);
    }
    w.close(']');
    w.key("flows").open('[');
    for (const auto& f : rank.flows)
      w.value({{"kind", f.join ? "async_done" : "async_start"}, {"token", f.token}, {"from_stream", f.from_stream},
               {"to_stream", f.to_stream}, {"from_s", f.from_s}, {"to_s", f.to_s}});
    w.close(']');
    w.member("stats", stats_json(rank.stats));
    w.close('}');
  }
  w.close(']');
  ojson summary = stats_json(r.summary);
  summary["critical_path"] = r.critical_path;
  w.member("summary", summary);
  if (!r.iteration_makespans_s.empty()) w.member("iteration_makespans_s", r.iteration_makespans_s);
  if (r.placement) w.member("placement", *r.placement);
  if (r.timing_overhead_s) w.member("timing_overhead_s", *r.timing_overhead_s);
  if (r.dispatch_s_per_command) w.member("dispatch_s_per_command", *r.dispatch_s_per_command);
  if (r.graph_launch_s) w.member("graph_launch_s", *r.graph_launch_s);
  w.close('}');
  os << "\n";
}

Report report_from_json(const ojson& j) {
  auto need = [](const ojson& o, const char* k, const std::string& ptr) -> const ojson& {
    if (!o.is_object() || !o.contains(k)) throw ThunkyError(ptr, std::string("missing field '") + k + "'");
    return o[k];
  };
  try {
    Report r;
    if (need(j, "format", "") != "thunky.report/1") throw ThunkyError("/format", "expected \"thunky.report/1\"");
    r.source = need(j, "source", "").get<std::string>();
    r.schedule = need(j, "schedule", "").get<std::string>();
    if (j.contains("machine") && !j["machine"].is_null()) r.machine = j["machine"].get<std::string>();
    if (j.contains("backend") && !j["backend"].is_null()) r.backend = j["backend"].get<std::string>();
    const ojson& mesh = need(j, "mesh", "");
    r.axis_names = need(mesh, "axis_names", "/mesh").get<std::vector<std::string>>();
    r.mesh_shape = need(mesh, "shape", "/mesh").get<std::vector<int64_t>>();
    r.makespan_s = need(j, "makespan_s", "").get<double>();
    int64_t mesh_size = 1;
    for (size_t d = 0; d < r.mesh_shape.size(); ++d) {
      if (r.mesh_shape[d] < 1 || r.mesh_shape[d] > (int64_t{1} << 20)) throw ThunkyError("/mesh/shape/" + std::to_string(d), "expected a positive size");
      mesh_size *= r.mesh_shape[d];
      if (mesh_size > (int64_t{1} << 24)) throw ThunkyError("/mesh/shape", "more than 2^24 ranks");
    }
    if (r.axis_names.size() != r.mesh_shape.size()) throw ThunkyError("/mesh", "axis_names and shape differ in length");
    const ojson& ranks = need(j, "ranks", "");
    if (!ranks.is_array()) throw ThunkyError("/ranks", "expected an array of ranks");
    for (size_t i = 0; i < ranks.size(); ++i) {
      std::string rp = "/ranks/" + std::to_string(i);
      RankReport rr;
      const ojson& rank = need(ranks[i], "rank", rp);
      if (!rank.is_number_integer() || rank.get<int64_t>() < 0 || rank.get<int64_t>() >= mesh_size)
        throw ThunkyError(rp + "/rank", "expected a rank of the mesh (an integer from 0 to " + std::to_string(mesh_size - 1) + "), got " + rank.dump());
      rr.rank = rank.get<int64_t>();
      rr.coords = need(ranks[i], "coords", rp).get<std::vector<int64_t>>();
      // A folded rank: the ops and flows of an earlier rank.
      if (ranks[i].contains("same_as")) {
        const ojson& same = ranks[i]["same_as"];
        auto it = same.is_number_integer()
                      ? std::find_if(r.ranks.begin(), r.ranks.end(), [&](const RankReport& e) { return e.rank == same.get<int64_t>(); })
                      : r.ranks.end();
        if (it == r.ranks.end()) throw ThunkyError(rp + "/same_as", "expected the number of a rank listed before this one, got " + same.dump());
        rr.ops = it->ops;
        rr.flows = it->flows;
        r.ranks.push_back(std::move(rr));
        continue;
      }
      const ojson& ops = need(ranks[i], "ops", rp);
      if (!ops.is_array()) throw ThunkyError(rp + "/ops", "expected an array of ops, got " + std::string(ops.type_name()));
      for (size_t k = 0; k < ops.size(); ++k) {
        std::string op_ptr = rp + "/ops/" + std::to_string(k);
        const ojson& o = ops[k];
        OpRecord rec;
        rec.id = need(o, "id", op_ptr).get<std::string>();
        rec.op = need(o, "op", op_ptr).get<std::string>();
        rec.name = o.value("name", "");
        rec.stream = need(o, "stream", op_ptr).get<std::string>();
        rec.start_s = need(o, "start_s", op_ptr).get<double>();
        rec.end_s = need(o, "end_s", op_ptr).get<double>();
        rec.bytes = o.value("bytes", int64_t{0});
        rec.flops = o.value("flops", 0.0);
        rec.algorithm = o.value("algorithm", "");
        rr.ops.push_back(rec);
      }
      if (ranks[i].contains("flows"))
        for (const auto& f : ranks[i]["flows"])
          rr.flows.push_back({f.at("from_stream").get<std::string>(), f.at("to_stream").get<std::string>(), f.at("from_s").get<double>(),
                              f.at("to_s").get<double>(), f.value("token", ""), f.value("kind", "") == "async_done"});
      r.ranks.push_back(std::move(rr));
    }
    if (j.contains("iteration_makespans_s")) r.iteration_makespans_s = j["iteration_makespans_s"].get<std::vector<double>>();
    if (j.contains("placement")) r.placement = j["placement"].get<std::string>();
    for (auto [key, field] : {std::pair{"timing_overhead_s", &r.timing_overhead_s}, std::pair{"dispatch_s_per_command", &r.dispatch_s_per_command},
                              std::pair{"graph_launch_s", &r.graph_launch_s}})
      if (j.contains(key)) *field = j[key].get<double>();
    summarize(r);
    return r;
  } catch (const ojson::exception& e) {
    throw ThunkyError("", std::string("malformed report: ") + e.what());
  }
}

namespace {
// "rank 3 (x=1, y=1)"
std::string rank_name(const Report& r, const RankReport& rank, const char* sep) {
  std::string s = "rank " + std::to_string(rank.rank);
  if (r.axis_names.empty()) return s;
  s += " (";
  for (size_t i = 0; i < r.axis_names.size() && i < rank.coords.size(); ++i)
    s += (i ? sep : "") + r.axis_names[i] + "=" + std::to_string(rank.coords[i]);
  return s + ")";
}
}  // namespace

void write_chrome_trace(const Report& r, std::ostream& os) {
  Writer w(os);
  w.open('{');
  w.key("traceEvents").open('[');
  int flow_id = 0;
  for (const auto& rank : r.ranks) {
    const int64_t pid = rank.rank;
    w.value({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", rank_name(r, rank, ", ")}}}});
    std::map<std::string, int> tids;
    auto tid = [&](const std::string& stream) {
      auto it = tids.find(stream);
      if (it != tids.end()) return it->second;
      int t = static_cast<int>(tids.size());
      tids[stream] = t;
      w.value({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t}, {"args", {{"name", stream}}}});
      return t;
    };
    tid("computation:0");
    for (const auto& op : rank.ops) {
      const int t = tid(op.stream);
      w.value({{"ph", "X"}, {"name", op.name.empty() ? op.op : op.name}, {"cat", op.op}, {"pid", pid}, {"tid", t},
               {"ts", op.start_s * 1e6}, {"dur", std::max(0.0, op.end_s - op.start_s) * 1e6},
               {"args", {{"id", op.id}, {"op", op.op}, {"bytes", op.bytes}, {"flops", op.flops}}}});
    }
    for (const auto& f : rank.flows) {
      ++flow_id;
      std::string name = std::string(f.join ? "async_done " : "async_start ") + f.token;
      const int from = tid(f.from_stream), to = tid(f.to_stream);
      w.value({{"ph", "s"}, {"name", name}, {"cat", "token"}, {"id", flow_id}, {"pid", pid}, {"tid", from}, {"ts", f.from_s * 1e6}, {"bp", "e"}});
      w.value({{"ph", "f"}, {"name", name}, {"cat", "token"}, {"id", flow_id}, {"pid", pid}, {"tid", to}, {"ts", f.to_s * 1e6}, {"bp", "e"}});
    }
  }
  for (const auto& l : r.links)
    for (const auto& [t, u] : l.samples) w.value({{"ph", "C"}, {"name", l.name}, {"pid", l.rank}, {"ts", t * 1e6}, {"args", {{"utilisation", u}}}});
  w.close(']');
  w.member("displayTimeUnit", "ns");
  w.close('}');
  os << "\n";
}

Report select_ranks(const Report& r, const std::vector<int64_t>& ranks) {
  Report out = r;
  const std::set<int64_t> keep(ranks.begin(), ranks.end());
  std::erase_if(out.ranks, [&](const RankReport& rank) { return !keep.count(rank.rank); });
  std::erase_if(out.links, [&](const LinkSeries& l) { return !keep.count(l.rank); });
  return out;
}

std::string us(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s * 1e6);
  return buf;
}

void print_table(const Report& r, std::ostream& os) {
  char line[256];
  os << r.schedule << " (" << r.source << (r.backend ? ", backend " + *r.backend : "") << (r.machine ? ", machine " + *r.machine : "")
     << "): makespan " << us(r.makespan_s) << " us";
  if (r.iteration_makespans_s.size() > 1) {
    auto v = r.iteration_makespans_s;
    std::sort(v.begin(), v.end());
    os << " (median of " << v.size() << " iterations; min " << us(v.front()) << ", max " << us(v.back()) << ")";
  }
  os << "\n";
  if (r.placement) os << "placement: " << *r.placement << (*r.placement == "shared-device" ? " (every rank on one GPU: not the timings of N GPUs)" : "") << "\n";
  if (r.timing_overhead_s || r.dispatch_s_per_command || r.graph_launch_s) {
    os << "instrumentation:";
    if (r.timing_overhead_s) os << " " << us(*r.timing_overhead_s) << " us of device time per timed command";
    if (r.dispatch_s_per_command) os << "; eager dispatch " << us(*r.dispatch_s_per_command) << " us of host time per command";
    if (r.graph_launch_s) os << "; graph launch " << us(*r.graph_launch_s) << " us";
    os << "\n";
  }
  std::snprintf(line, sizeof line, "%-26s %8s %14s %14s %14s %9s\n", "rank", "ops", "compute_us", "comm_us", "exposed_us", "overlap");
  os << line;
  auto row = [&](const std::string& label, size_t ops, const RankStats& s) {
    std::snprintf(line, sizeof line, "%-26s %8zu %14s %14s %14s %8.1f%%\n", label.c_str(), ops, us(s.compute_s).c_str(), us(s.comm_s).c_str(),
                  us(s.exposed_comm_s).c_str(), 100 * s.overlap_fraction);
    os << line;
  };
  for (const auto& rank : r.ranks) {
    row(rank_name(r, rank, ","), rank.ops.size(), rank.stats);
  }
  if (r.ranks.size() > 1) {
    size_t ops = 0;
    for (const auto& rank : r.ranks) ops += rank.ops.size();
    row("mean", ops / r.ranks.size(), r.summary);
  }
}

std::string write_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream f(path);
  if (!f) return "cannot write '" + path + "'";
  write(f);
  f.close();  // a full device fails here, when the buffer is written
  if (!f) return "cannot write '" + path + "'";
  return "";
}

std::string write_json_file(const std::string& path, const ojson& j) {
  return write_file(path, [&](std::ostream& os) { os << j.dump(1) << "\n"; });
}

}  // namespace thunky
