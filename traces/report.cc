#include "traces/report.h"

#include "core/files.h"
#include "core/schedule.h"
#include "core/json_reader.h"

#include <algorithm>
#include <unordered_map>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

namespace thunky {

using ojson = nlohmann::ordered_json;

bool is_collective_op(const std::string& name) {
  const std::optional<Op> op = op_named(name);
  return op && is_collective(*op);
}

namespace {

using Interval = std::pair<double, double>;

// Adds [s, e] to the disjoint, ordered intervals v. The intervals it
// touches are found from the back: none lies after it when intervals come
// in order of start or of end, so merging is then amortised constant time.
void merge_into(std::vector<Interval>& v, double s, double e) {
  if (e <= s) return;
  auto after = v.end();
  while (after != v.begin() && std::prev(after)->first > e) --after;
  auto first = after;
  while (first != v.begin() && std::prev(first)->second >= s) --first;
  if (first == after) {
    v.insert(after, {s, e});
    return;
  }
  *first = {std::min(s, first->first), std::max(e, std::prev(after)->second)};
  v.erase(first + 1, after);
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

// Moves what lies before h out of v into `below`, splitting the interval
// that straddles h.
void split_at(std::vector<Interval>& v, double h, std::vector<Interval>& below) {
  size_t whole = 0;
  for (; whole < v.size() && v[whole].first < h; ++whole) {
    if (v[whole].second > h) {
      below.push_back({v[whole].first, h});
      v[whole].first = h;
      break;
    }
    below.push_back(v[whole]);
  }
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(whole));
}

}  // namespace

void TimelineTally::add(double start_s, double end_s, bool collective, std::optional<double> transfer_start_s, double interference_s) {
  merge_into(collective ? comm_ : compute_, start_s, end_s);
  (collective ? comm_interference_s_ : compute_interference_s_) += interference_s;
  if (collective) merge_into(transfer_, transfer_start_s.value_or(start_s), end_s);
  ++ops_;
  last_end_s_ = std::max(last_end_s_, end_s);
}

void TimelineTally::fold(double horizon) {
  std::vector<Interval> compute, comm, transfer;
  split_at(compute_, horizon, compute);
  split_at(comm_, horizon, comm);
  split_at(transfer_, horizon, transfer);
  // Before and after the horizon are disjoint: each length is the sum of
  // its two parts, and so is each difference.
  compute_s_ += length(compute);
  comm_s_ += length(comm);
  transfer_s_ += length(transfer);
  exposed_comm_s_ += minus_length(comm, compute);
  exposed_transfer_s_ += minus_length(transfer, compute);
}

RankStats TimelineTally::stats() const {
  RankStats s;
  s.compute_s = compute_s_ + length(compute_);
  s.comm_s = comm_s_ + length(comm_);
  s.exposed_comm_s = exposed_comm_s_ + minus_length(comm_, compute_);
  s.overlap_fraction = s.comm_s > 0 ? 1.0 - s.exposed_comm_s / s.comm_s : 0.0;
  s.transfer_s = transfer_s_ + length(transfer_);
  s.wait_s = std::max(0.0, s.comm_s - s.transfer_s);
  s.exposed_transfer_s = exposed_transfer_s_ + minus_length(transfer_, compute_);
  s.exposed_wait_s = std::max(0.0, s.exposed_comm_s - s.exposed_transfer_s);
  s.compute_interference_s = compute_interference_s_;
  s.comm_interference_s = comm_interference_s_;
  s.ops = ops_;
  return s;
}

const RankReport& Report::timeline(const RankReport& r) const {
  if (!r.same_as) return r;
  // Ranks are listed in order, so rank k is usually at k.
  const int64_t k = *r.same_as;
  if (k >= 0 && k < static_cast<int64_t>(ranks.size()) && ranks[static_cast<size_t>(k)].rank == k && !ranks[static_cast<size_t>(k)].same_as)
    return ranks[static_cast<size_t>(k)];
  for (const auto& x : ranks)
    if (x.rank == *r.same_as && !x.same_as) return x;
  return r;
}

void summarize_stats(Report& r) {
  RankStats total;
  for (auto& rank : r.ranks) {
    // A folded rank's stats are its source's (listed before it).
    if (rank.same_as) rank.stats = r.timeline(rank).stats;
    total.compute_s += rank.stats.compute_s;
    total.comm_s += rank.stats.comm_s;
    total.exposed_comm_s += rank.stats.exposed_comm_s;
    total.wait_s += rank.stats.wait_s;
    total.transfer_s += rank.stats.transfer_s;
    total.exposed_wait_s += rank.stats.exposed_wait_s;
    total.exposed_transfer_s += rank.stats.exposed_transfer_s;
    total.compute_interference_s += rank.stats.compute_interference_s;
    total.comm_interference_s += rank.stats.comm_interference_s;
    total.ops += rank.stats.ops;
  }
  const double n = r.ranks.empty() ? 1.0 : static_cast<double>(r.ranks.size());
  r.summary.compute_s = total.compute_s / n;
  r.summary.comm_s = total.comm_s / n;
  r.summary.exposed_comm_s = total.exposed_comm_s / n;
  r.summary.wait_s = total.wait_s / n;
  r.summary.transfer_s = total.transfer_s / n;
  r.summary.exposed_wait_s = total.exposed_wait_s / n;
  r.summary.exposed_transfer_s = total.exposed_transfer_s / n;
  r.summary.compute_interference_s = total.compute_interference_s / n;
  r.summary.comm_interference_s = total.comm_interference_s / n;
  r.summary.overlap_fraction = r.summary.comm_s > 0 ? 1.0 - r.summary.exposed_comm_s / r.summary.comm_s : 0.0;
  r.summary.ops = total.ops / std::max<int64_t>(1, static_cast<int64_t>(r.ranks.size()));
}

void summarize(Report& r) {
  r.makespan_s = 0;
  for (auto& rank : r.ranks) {
    if (rank.same_as) continue;
    // A tally merges ops in start order in constant time each; a report
    // that lists them otherwise (a file from elsewhere) is added sorted,
    // not one out-of-order op at a time.
    std::vector<OpRecord*> ops;
    ops.reserve(rank.ops.size());
    for (auto& op : rank.ops) ops.push_back(&op);
    auto by_start = [](const OpRecord* a, const OpRecord* b) { return a->start_s < b->start_s; };
    if (!std::is_sorted(ops.begin(), ops.end(), by_start)) std::stable_sort(ops.begin(), ops.end(), by_start);
    TimelineTally tally;
    for (OpRecord* op : ops) {
      op->collective = is_collective_op(op->op);
      tally.add(op->start_s, op->end_s, op->collective, op->transfer_start_s, op->interference_s);
    }
    rank.stats = tally.stats();
    r.makespan_s = std::max(r.makespan_s, tally.last_end_s());
  }
  summarize_stats(r);
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
  if (!std::is_sorted(by_end.begin(), by_end.end(), by_end_s)) std::sort(by_end.begin(), by_end.end(), by_end_s);
  const double eps = 1e-12;
  // Of ops that ended together, the one on `next`'s stream (which waited
  // for it in stream order), else the first by id: the path does not depend
  // on the order the ops are listed in.
  auto before = [](const OpRecord* a, const OpRecord* b, const OpRecord* next) {
    const bool a_same = a->stream == next->stream, b_same = b->stream == next->stream;
    return a_same != b_same ? a_same : a->id < b->id;
  };
  while (cur && r.critical_path.size() < by_end.size()) {
    r.critical_path.push_back(cur->id);
    auto it = std::upper_bound(by_end.begin(), by_end.end(), cur->start_s + eps, [](double t, const OpRecord* op) { return t < op->end_s; });
    const OpRecord* prev = nullptr;
    while (it != by_end.begin()) {
      --it;
      if (*it == cur) continue;
      if (prev && (*it)->end_s < prev->end_s - eps) break;
      if (!prev || before(*it, prev, cur)) prev = *it;
    }
    cur = prev;
  }
  std::reverse(r.critical_path.begin(), r.critical_path.end());
}

namespace {
ojson stats_json(const RankStats& s) {
  return ojson{{"compute_s", s.compute_s},           {"comm_s", s.comm_s},
               {"wait_s", s.wait_s},                 {"transfer_s", s.transfer_s},
               {"exposed_comm_s", s.exposed_comm_s}, {"exposed_wait_s", s.exposed_wait_s},
               {"exposed_transfer_s", s.exposed_transfer_s}, {"overlap_fraction", s.overlap_fraction},
               {"compute_interference_s", s.compute_interference_s}, {"comm_interference_s", s.comm_interference_s}};
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
           x.bytes == y.bytes && x.flops == y.flops && x.algorithm == y.algorithm && x.transfer_start_s == y.transfer_start_s &&
           x.interference_s == y.interference_s;
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
    if (rank.same_as || (&rank != &r.ranks.front() && same_timeline(rank, r.ranks.front()))) {
      w.member("same_as", rank.same_as ? *rank.same_as : r.ranks.front().rank);
      w.close('}');
      continue;
    }
    w.key("ops").open('[');
    for (const auto& op : rank.ops) {
      ojson o = {{"id", op.id}, {"op", op.op}, {"name", op.name}, {"stream", op.stream}, {"start_s", op.start_s},
                 {"end_s", op.end_s}, {"bytes", op.bytes}, {"flops", op.flops}};
      if (!op.algorithm.empty()) o["algorithm"] = op.algorithm;
      if (op.transfer_start_s) o["transfer_start_s"] = *op.transfer_start_s;
      if (op.interference_s > 0) {
        o["solo_s"] = op.end_s - op.start_s - op.interference_s;
        o["interference_s"] = op.interference_s;
      }
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
  if (r.warmup_iterations) w.member("warmup_iterations", *r.warmup_iterations);
  if (r.placement) w.member("placement", *r.placement);
  if (r.timing_overhead_s) w.member("timing_overhead_s", *r.timing_overhead_s);
  if (r.dispatch_s_per_command) w.member("dispatch_s_per_command", *r.dispatch_s_per_command);
  if (r.graph_launch_s) w.member("graph_launch_s", *r.graph_launch_s);
  if (r.host_cores) w.member("host_cores", *r.host_cores);
  if (r.processes) w.member("processes", *r.processes);
  if (r.clock_uncertainty_s) w.member("clock_uncertainty_s", *r.clock_uncertainty_s);
  w.close('}');
  os << "\n";
}

namespace {

using json_reader::Obj;
using json_reader::Value;

// Every figure of a report is a finite, non-negative number: seconds,
// bytes, flops, cores.
double number(Obj& o, std::string_view k) {
  return json_reader::non_negative(o.need(k), o.at(k));
}

int64_t integer(Value v, const std::string& ptr) {
  if (!v.is_number_integer()) json_reader::fail(ptr, "expected an integer, got " + json_reader::type_name(v));
  return json_reader::as_int(v, ptr);
}

std::vector<int64_t> integers(Value v, const std::string& ptr) {
  if (!v.is_array()) json_reader::fail(ptr, "expected a list of integers, got " + json_reader::type_name(v));
  std::vector<int64_t> out;
  v.each_element([&](size_t i, Value e) { out.push_back(integer(e, json_reader::child(ptr, i))); });
  return out;
}

std::vector<std::string> strings(Value v, const std::string& ptr) {
  if (!v.is_array()) json_reader::fail(ptr, "expected a list of strings, got " + json_reader::type_name(v));
  std::vector<std::string> out;
  v.each_element([&](size_t i, Value e) {
    if (!e.is_string()) json_reader::fail(json_reader::child(ptr, i), "expected a string, got " + json_reader::type_name(e));
    out.emplace_back(e.str());
  });
  return out;
}

std::optional<std::string> string_or_null(Obj& o, std::string_view k) {
  auto v = o.get(k);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_string()) json_reader::fail(o.at(k), "expected a string or null, got " + json_reader::type_name(*v));
  return std::string(v->str());
}

// The stats and summary are recomputed from the ops (summarize): read, not kept.
void skip_stats(Obj& o, std::string_view k) {
  if (auto v = o.get(k)) {
    Obj stats(*v, o.at(k));
    for (const char* f : {"compute_s", "comm_s", "wait_s", "transfer_s", "exposed_comm_s", "exposed_wait_s", "exposed_transfer_s", "overlap_fraction",
                          "compute_interference_s", "comm_interference_s"})
      stats.num_or(f, 0);
    stats.get("critical_path");
    stats.done();
  }
}

OpRecord read_op(Value v, const std::string& ptr) {
  Obj o(v, ptr);
  OpRecord rec;
  rec.id = o.str_ref("id");
  rec.op = o.str_ref("op");
  rec.name = o.str_or("name", "");
  rec.stream = o.str_ref("stream");
  rec.start_s = number(o, "start_s");
  rec.end_s = number(o, "end_s");
  if (rec.end_s < rec.start_s) json_reader::fail(o.at("end_s"), "ends before its start_s");
  if (auto b = o.get("bytes")) rec.bytes = integer(*b, o.at("bytes"));
  if (rec.bytes < 0) json_reader::fail(o.at("bytes"), "expected a non-negative number");
  if (o.has("flops")) rec.flops = number(o, "flops");
  rec.algorithm = o.str_or("algorithm", "");
  if (o.has("transfer_start_s")) {
    rec.transfer_start_s = number(o, "transfer_start_s");
    if (*rec.transfer_start_s < rec.start_s || *rec.transfer_start_s > rec.end_s)
      json_reader::fail(o.at("transfer_start_s"), "lies outside the op's [start_s, end_s]");
  }
  if (o.has("interference_s")) {
    rec.interference_s = number(o, "interference_s");
    if (rec.interference_s < 0 || rec.interference_s > rec.end_s - rec.start_s)
      json_reader::fail(o.at("interference_s"), "expected from 0 to the op's end_s - start_s");
  }
  o.num_or("solo_s", 0);  // end_s - start_s - interference_s: derived, not kept
  o.done();
  return rec;
}

FlowEdge read_flow(Value v, const std::string& ptr) {
  Obj o(v, ptr);
  FlowEdge f;
  const std::string kind = o.str("kind");
  if (kind != "async_start" && kind != "async_done") json_reader::fail(o.at("kind"), "expected async_start or async_done");
  f.join = kind == "async_done";
  f.token = o.str_or("token", "");
  f.from_stream = o.str("from_stream");
  f.to_stream = o.str("to_stream");
  f.from_s = number(o, "from_s");
  f.to_s = number(o, "to_s");
  o.done();
  return f;
}

}  // namespace

Report parse_report(const std::string& text) {
  json_reader::Document doc(text);
  Obj j(doc.root(), "");
  Report r;
  if (j.str("format") != "thunky.report/1") json_reader::fail("/format", "expected \"thunky.report/1\"");
  r.source = j.str("source");
  r.schedule = j.str("schedule");
  r.machine = string_or_null(j, "machine");
  r.backend = string_or_null(j, "backend");
  {
    Obj mesh(j.need("mesh"), "/mesh");
    r.axis_names = strings(mesh.need("axis_names"), "/mesh/axis_names");
    r.mesh_shape = integers(mesh.need("shape"), "/mesh/shape");
    mesh.done();
  }
  r.makespan_s = number(j, "makespan_s");
  int64_t mesh_size = 1;
  for (size_t d = 0; d < r.mesh_shape.size(); ++d) {
    if (r.mesh_shape[d] < 1 || r.mesh_shape[d] > (int64_t{1} << 20)) json_reader::fail("/mesh/shape/" + std::to_string(d), "expected a positive size");
    mesh_size *= r.mesh_shape[d];
    if (mesh_size > (int64_t{1} << 24)) json_reader::fail("/mesh/shape", "more than 2^24 ranks");
  }
  if (r.axis_names.size() != r.mesh_shape.size()) json_reader::fail("/mesh", "axis_names and shape differ in length");
  Value ranks = j.need("ranks");
  if (!ranks.is_array()) json_reader::fail("/ranks", "expected an array of ranks, got " + json_reader::type_name(ranks));
  ranks.each_element([&](size_t i, Value v) {
    const std::string rp = json_reader::child("/ranks", i);
    Obj o(v, rp);
    RankReport rr;
    const int64_t rank = integer(o.need("rank"), o.at("rank"));
    if (rank < 0 || rank >= mesh_size)
      json_reader::fail(o.at("rank"), "expected a rank of the mesh (an integer from 0 to " + std::to_string(mesh_size - 1) + "), got " + std::to_string(rank));
    rr.rank = rank;
    rr.coords = integers(o.need("coords"), o.at("coords"));
    if (auto same = o.get("same_as")) {
      // A folded rank: the ops and flows of an earlier rank.
      const int64_t k = same->is_number_integer() ? static_cast<int64_t>(same->number()) : -1;
      auto it = std::find_if(r.ranks.begin(), r.ranks.end(), [&](const RankReport& e) { return e.rank == k; });
      if (it == r.ranks.end()) json_reader::fail(o.at("same_as"), "expected the number of a rank listed before this one");
      rr.same_as = it->same_as ? *it->same_as : it->rank;
    } else {
      Value ops = o.need("ops");
      if (!ops.is_array()) json_reader::fail(o.at("ops"), "expected an array of ops, got " + json_reader::type_name(ops));
      rr.ops.reserve(ops.size());
      ops.each_element([&](size_t k, Value e) { rr.ops.push_back(read_op(e, json_reader::child(o.at("ops"), k))); });
      if (auto flows = o.get("flows")) {
        if (!flows->is_array()) json_reader::fail(o.at("flows"), "expected an array of flows");
        flows->each_element([&](size_t k, Value e) { rr.flows.push_back(read_flow(e, json_reader::child(o.at("flows"), k))); });
      }
    }
    skip_stats(o, "stats");
    o.done();
    r.ranks.push_back(std::move(rr));
  });
  skip_stats(j, "summary");
  if (auto its = j.get("iteration_makespans_s")) {
    if (!its->is_array()) json_reader::fail("/iteration_makespans_s", "expected a list of seconds");
    its->each_element([&](size_t i, Value e) {
      r.iteration_makespans_s.push_back(json_reader::non_negative(e, json_reader::child("/iteration_makespans_s", i)));
    });
  }
  if (j.has("warmup_iterations")) {
    const double n = number(j, "warmup_iterations");
    if (!(n >= 0 && n <= 1e6) || n != std::floor(n)) json_reader::fail("/warmup_iterations", "expected a whole number of iterations, 0 to 1000000");
    r.warmup_iterations = static_cast<int64_t>(n);
  }
  r.placement = string_or_null(j, "placement");
  for (auto [key, field] : {std::pair{"timing_overhead_s", &r.timing_overhead_s}, std::pair{"dispatch_s_per_command", &r.dispatch_s_per_command},
                            std::pair{"graph_launch_s", &r.graph_launch_s}})
    if (j.has(key)) *field = number(j, key);
  if (j.has("host_cores")) {
    const double cores = number(j, "host_cores");
    if (!(cores >= 1 && cores <= 1 << 20) || cores != std::floor(cores)) json_reader::fail("/host_cores", "expected a whole number of cores, 1 to 2^20");
    r.host_cores = static_cast<int64_t>(cores);
  }
  if (j.has("processes")) {
    const double n = number(j, "processes");
    if (!(n >= 1 && n <= static_cast<double>(mesh_size)) || n != std::floor(n))
      json_reader::fail("/processes", "expected a whole number of processes, 1 to the mesh's " + std::to_string(mesh_size) + " ranks");
    r.processes = static_cast<int64_t>(n);
  }
  if (j.has("clock_uncertainty_s")) r.clock_uncertainty_s = json_reader::non_negative(*j.get("clock_uncertainty_s"), "/clock_uncertainty_s");
  j.done();
  summarize(r);
  return r;
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

// The ranks that share one timeline (a class the simulator folded), as a
// user reads them: per axis the coordinate they share, * where they take
// every one, else the ones they take ("pp=3, dp=* (1024 ranks)").
std::string class_name(const Report& r, const std::vector<const RankReport*>& members) {
  if (members.size() == 1) return rank_name(r, *members.front(), ",");
  std::string s;
  for (size_t d = 0; d < r.axis_names.size() && d < r.mesh_shape.size(); ++d) {
    std::vector<int64_t> seen;
    for (const RankReport* m : members) seen.push_back(m->coords[d]);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    s += (d ? ", " : "") + r.axis_names[d] + "=";
    if (seen.size() == static_cast<size_t>(r.mesh_shape[d]) && seen.size() > 1) {
      s += "*";
      continue;
    }
    for (size_t k = 0; k < seen.size() && k < 4; ++k) s += (k ? "," : "") + std::to_string(seen[k]);
    if (seen.size() > 4) s += ",... (" + std::to_string(seen.size()) + ")";
  }
  return s + " (" + std::to_string(members.size()) + " ranks)";
}
}  // namespace

void write_chrome_trace(const Report& r, std::ostream& os) {
  Writer w(os);
  w.open('{');
  w.key("traceEvents").open('[');
  int flow_id = 0;
  for (const auto& rank : r.ranks) {
    const int64_t pid = rank.rank;
    w.value({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", rank.label.empty() ? rank_name(r, rank, ", ") : rank.label}}}});
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
    const RankReport& line = r.timeline(rank);
    for (const auto& op : line.ops) {
      const int t = tid(op.stream);
      ojson args = {{"id", op.id}, {"op", op.op}, {"bytes", op.bytes}, {"flops", op.flops}};
      if (op.interference_s > 0) args["interference_us"] = op.interference_s * 1e6;
      w.value({{"ph", "X"}, {"name", op.name.empty() ? op.op : op.name}, {"cat", op.op}, {"pid", pid}, {"tid", t},
               {"ts", op.start_s * 1e6}, {"dur", std::max(0.0, op.end_s - op.start_s) * 1e6}, {"args", args}});
      // A collective's wait for the other members: a slice of its own,
      // nested at the start of the collective's.
      if (op.transfer_start() > op.start_s)
        w.value({{"ph", "X"}, {"name", "wait"}, {"cat", "wait"}, {"pid", pid}, {"tid", t}, {"ts", op.start_s * 1e6},
                 {"dur", (op.transfer_start() - op.start_s) * 1e6}, {"args", {{"id", op.id}, {"waits_for", "the other members of the collective"}}}});
    }
    for (const auto& f : line.flows) {
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
  for (auto& rank : out.ranks)
    if (rank.same_as && keep.count(rank.rank) && !keep.count(*rank.same_as)) {
      const RankReport& source = r.timeline(rank);
      rank.ops = source.ops;
      rank.flows = source.flows;
      rank.same_as.reset();
    }
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
  if (r.host_cores) os << "host cores: " << *r.host_cores << " (each compute command runs on one, first come first served)\n";
  if (r.processes)
    os << "processes: " << *r.processes << ", a block of " << r.ranks.size() / static_cast<size_t>(*r.processes) << " ranks each"
       << (r.clock_uncertainty_s ? "; their clocks agree within " + us(*r.clock_uncertainty_s) + " us" : "") << "\n";
  if (r.placement) os << "placement: " << *r.placement << (*r.placement == "shared-device" ? " (every rank on one GPU: not the timings of N GPUs)" : "") << "\n";
  if (r.timing_overhead_s || r.dispatch_s_per_command || r.graph_launch_s) {
    os << "instrumentation:";
    if (r.timing_overhead_s) os << " " << us(*r.timing_overhead_s) << " us of device time per timed command";
    if (r.dispatch_s_per_command) os << "; eager dispatch " << us(*r.dispatch_s_per_command) << " us of host time per command";
    if (r.graph_launch_s) os << "; graph launch " << us(*r.graph_launch_s) << " us";
    os << "\n";
  }
  // Communication (comm_us) is waiting for the other members (wait_us)
  // and moving data (transfer_us); exposed_us, the part under no compute,
  // splits alike (exp_wait_us is its waiting).
  // Where interference cost anything (thunky-sim), two more columns: the
  // time compute and communication lost to it.
  const bool lost = r.summary.compute_interference_s > 0 || r.summary.comm_interference_s > 0;
  std::snprintf(line, sizeof line, "%-26s %8s %14s %14s %14s %9s %14s %14s %14s", "rank", "ops", "compute_us", "comm_us", "exposed_us", "overlap",
                "wait_us", "transfer_us", "exp_wait_us");
  os << line << (lost ? "  intf_comp_us  intf_comm_us" : "") << "\n";
  auto figures = [&](const RankStats& s) {
    std::snprintf(line, sizeof line, "%8lld %14s %14s %14s %8.1f%% %14s %14s %14s", static_cast<long long>(s.ops), us(s.compute_s).c_str(),
                  us(s.comm_s).c_str(), us(s.exposed_comm_s).c_str(), 100 * s.overlap_fraction, us(s.wait_s).c_str(), us(s.transfer_s).c_str(),
                  us(s.exposed_wait_s).c_str());
    std::string figs = line;
    if (lost) {
      std::snprintf(line, sizeof line, " %13s %13s", us(s.compute_interference_s).c_str(), us(s.comm_interference_s).c_str());
      figs += line;
    }
    return figs;
  };
  auto row = [&](const std::string& label, const std::string& figs) {
    std::snprintf(line, sizeof line, "%-26s ", label.c_str());
    os << line << figs << "\n";
  };
  // Folded by thunky-sim, a row a class of ranks, its representative's.
  if (r.source == "sim" && std::any_of(r.ranks.begin(), r.ranks.end(), [](const RankReport& x) { return x.same_as.has_value(); })) {
    std::unordered_map<int64_t, size_t> row_of;  // representative -> its class
    std::vector<std::vector<const RankReport*>> classes;
    for (const RankReport& x : r.ranks) {
      auto [it, fresh] = row_of.emplace(x.same_as.value_or(x.rank), classes.size());
      if (fresh) classes.emplace_back();
      classes[it->second].push_back(&x);
    }
    for (const auto& members : classes) row(class_name(r, members), figures(members.front()->stats));
    if (r.ranks.size() > 1) row("mean", figures(r.summary));
    return;
  }
  // A row a rank up to 32 ranks; past that, consecutive ranks whose rows
  // read the same share one ("ranks 1-511").
  const bool runs = r.ranks.size() > 32;
  for (size_t i = 0; i < r.ranks.size();) {
    const std::string figs = figures(r.ranks[i].stats);
    size_t j = i + 1;
    while (runs && j < r.ranks.size() && figures(r.ranks[j].stats) == figs) ++j;
    row(j == i + 1 ? rank_name(r, r.ranks[i], ",") : "ranks " + std::to_string(r.ranks[i].rank) + "-" + std::to_string(r.ranks[j - 1].rank), figs);
    i = j;
  }
  if (r.ranks.size() > 1) row("mean", figures(r.summary));
}

std::string write_json_file(const std::string& path, const ojson& j) {
  return write_output_file(path, [&](std::ostream& os) { os << j.dump(1) << "\n"; });
}

}  // namespace thunky
