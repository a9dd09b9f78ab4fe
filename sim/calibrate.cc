#include "sim/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "core/json_reader.h"
#include "core/status.h"
#include "sim/nccl_model.h"

namespace thunky::sim {

namespace {

[[noreturn]] void fail_at(int line, const std::string& what) { throw ThunkyError("line " + std::to_string(line), what); }

std::optional<Op> op_of_test(const std::string& name) {
  if (name.find("all_reduce") != std::string::npos) return Op::all_reduce;
  if (name.find("all_gather") != std::string::npos) return Op::all_gather;
  if (name.find("reduce_scatter") != std::string::npos) return Op::reduce_scatter;
  if (name.find("alltoall") != std::string::npos || name.find("all_to_all") != std::string::npos) return Op::all_to_all;
  if (name.find("sendrecv") != std::string::npos) return Op::collective_permute;
  return std::nullopt;
}

bool parse_number(const std::string& s, double& out) {
  if (s == "N/A") {
    out = 0;
    return true;
  }
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && std::isfinite(out) && out >= 0;
}

// Where an NCCL log message starts in a line ("HOST:PID:TID [DEV] NCCL
// INFO ...", which NCCL_DEBUG writes to the same stdout), and where its
// host ends; npos when there is none.
struct LogAt {
  size_t start = std::string::npos, host_end = 0;
};

// nccl-tests prints a row's size columns before it runs the collective and
// its times after, so a message can start right after a row's text, its
// host glued to the last column ("-1" then "node7:..." reads "-1node7:..."):
// a host the run has named is looked for first, else the whole word before
// ":PID:TID [DEV] NCCL " is taken for the host.
LogAt nccl_log_at(const std::string& line, const std::set<std::string>& hosts) {
  auto digits_before = [&](size_t end) {
    size_t j = end;
    while (j > 0 && std::isdigit(static_cast<unsigned char>(line[j - 1]))) --j;
    return j;
  };
  for (size_t tag = line.find("] NCCL "); tag != std::string::npos; tag = line.find("] NCCL ", tag + 1)) {
    const size_t dev = digits_before(tag);
    if (dev == tag || dev < 2 || line[dev - 1] != '[' || line[dev - 2] != ' ') continue;
    const size_t tid = digits_before(dev - 2);
    if (tid == dev - 2 || tid == 0 || line[tid - 1] != ':') continue;
    const size_t pid = digits_before(tid - 1);
    if (pid == tid - 1 || pid == 0 || line[pid - 1] != ':') continue;
    const size_t host_end = pid - 1;
    size_t word = host_end;
    while (word > 0 && !std::isspace(static_cast<unsigned char>(line[word - 1]))) --word;
    if (word == host_end) continue;
    // A host name has at most 255 characters.
    for (size_t from = std::max(word, host_end > 255 ? host_end - 255 : 0); from < host_end; ++from)
      if (hosts.count(line.substr(from, host_end - from))) return {from, host_end};
    return {word, host_end};
  }
  return {};
}

// NCCL's pick in a log message ("AllReduce: 268435456 Bytes -> Algo RING
// proto SIMPLE ...", NCCL 2.2x), in thunky's names ("ring/Simple"), or "".
std::string nccl_pick(const std::string& message) {
  const size_t at = message.find(" Bytes -> Algo ");
  if (at == std::string::npos) return "";
  std::istringstream words(message.substr(at + 15));
  std::string algo, proto_word, proto;
  if (!(words >> algo >> proto_word >> proto) || proto_word != "proto") return "";
  std::transform(algo.begin(), algo.end(), algo.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (proto == "SIMPLE") proto = "Simple";
  return algo + "/" + proto;
}

// The most ranks a run may have: 2^24 GPUs is past any machine, and keeps
// every count derived from it far from overflow.
constexpr int64_t kMaxRunRanks = int64_t{1} << 24;
const std::string kTooManyRanks = "more than 2^24 ranks";

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1); }

// Gives rows [first, end) their run's figures: its ranks, the ranks on
// each host (ranks_per_host 0 where hosts differ), its groups and the GPUs
// one thread drives.
// How a run was made, beyond its ranks: what each of its rows carries.
struct RunMade {
  int64_t groups = 1, gpus = 1, grouped = 1;
  bool blocking = false;
};

void give_run(std::vector<NcclTestRow>& rows, size_t first, int64_t ranks, const std::map<std::string, int64_t>& on_host, const RunMade& made) {
  int64_t per_host = on_host.empty() ? 0 : on_host.begin()->second;
  for (const auto& [host, k] : on_host)
    if (k != per_host) per_host = 0;
  for (size_t i = first; i < rows.size(); ++i) {
    rows[i].ranks = ranks;
    rows[i].groups = std::max<int64_t>(1, made.groups);
    rows[i].hosts = static_cast<int64_t>(on_host.size());
    rows[i].ranks_per_host = per_host;
    rows[i].gpus_per_thread = made.gpus;
    rows[i].blocking = made.blocking;
    rows[i].grouped = std::max<int64_t>(1, made.grouped);
  }
}

// nccl-tests -J FILE.json (2.17 on) writes the run as JSON: "args" (the
// program first), "config" (nthreads, ngpus, graph, and "devices", one a
// process: its group and hostname), "results" (size, and "out_of_place"
// and "in_place", each null or with its "time" in us). Keys not read here
// are left alone: nccl-tests adds some from version to version.
std::vector<NcclTestRow> read_nccl_tests_json(const std::string& text, const std::string& file) {
  using json_reader::as_int;
  using json_reader::fail;
  using json_reader::Obj;
  using json_reader::Value;
  json_reader::Document doc(text);
  Obj top(doc.root(), "");
  std::optional<Op> op;
  if (auto args = top.get("args"))
    args->each_element([&](size_t i, Value program) {
      if (i == 0 && program.is_string()) op = op_of_test(base_name(std::string(program.str())));
    });
  if (!op) op = op_of_test(base_name(file));
  if (!op) fail("/args/0", "cannot tell the collective: neither the program (args[0]) nor the file name names one (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, sendrecv_perf)");
  Obj config(top.need("config"), "/config");
  // Counts past 2^24 are no run's; bounded, their products cannot overflow.
  auto count = [&](std::string_view key, int64_t fallback) {
    auto v = config.get(key);
    if (!v) return fallback;
    const int64_t k = as_int(*v, config.at(key));
    if (k < 0 || k > int64_t{1} << 24) fail(config.at(key), "expected a count from 0 to 2^24, got " + std::to_string(k));
    return k;
  };
  const int64_t per_process = count("nthreads", 1) * count("ngpus", 1);
  // Under CUDA graphs the thread launches a graph of iterations: no floor.
  const int64_t gpus = count("graph", 0) > 0 ? 0 : std::max<int64_t>(count("ngpus", 1), 1);
  // One device a process (its first rank's); the table is the first
  // process's group's (NCCL_TESTS_SPLIT).
  int64_t ranks = per_process, groups = 1;
  std::map<std::string, int64_t> on_host;
  if (auto devices = config.get("devices")) {
    if (!devices->is_array()) fail(config.at("devices"), "expected an array, got " + json_reader::type_name(*devices));
    if (devices->size() > (size_t{1} << 20)) fail(config.at("devices"), "more than 2^20 processes");
    std::optional<int64_t> first_group;
    std::set<int64_t> seen;
    int64_t processes = 0;
    devices->each_element([&](size_t i, Value d) {
      const std::string at = json_reader::child(config.at("devices"), i);
      Obj device(d, at);
      const int64_t group = device.get("group") ? as_int(device.need("group"), device.at("group")) : 0;
      if (!first_group) first_group = group;
      seen.insert(group);
      if (group != *first_group) return;
      ++processes;
      if (device.has("hostname")) on_host[device.str("hostname")] += per_process;
    });
    if (processes > 0) ranks = per_process > kMaxRunRanks / processes ? kMaxRunRanks + 1 : processes * per_process;
    groups = static_cast<int64_t>(seen.size());
  }
  if (ranks < 2) fail("/config", "cannot tell how many ranks ran: no devices and nthreads x ngpus under 2");
  if (ranks > kMaxRunRanks) fail("/config", kTooManyRanks);
  std::vector<NcclTestRow> rows;
  Value results = top.need("results");
  if (!results.is_array()) fail("/results", "expected an array, got " + json_reader::type_name(results));
  results.each_element([&](size_t i, Value v) {
    const std::string at = json_reader::child("/results", i);
    Obj result(v, at);
    NcclTestRow r;
    r.op = *op;
    r.file = file;
    r.pointer = at;
    r.bytes = static_cast<double>(as_int(result.need("size"), result.at("size")));
    if (r.bytes < 0) fail(result.at("size"), "a negative size");
    // all_gather and reduce_scatter time nothing at size 0.
    if (r.bytes == 0) return;
    auto time_of = [&](std::string_view half) {
      auto h = result.get(half);
      if (!h || h->is_null()) return 0.0;
      Obj o(*h, result.at(half));
      if (o.has("cpu_time")) fail(o.at("cpu_time"), "the run's times are the host's ('cpu_time', nccl-tests -C 1), not the collective's; run it again without -C");
      Value t = o.need("time");
      if (!t.is_number() || !std::isfinite(t.number()) || t.number() < 0) fail(o.at("time"), "expected a number of microseconds, got " + t.dump());
      return t.number() * 1e-6;
    };
    r.out_of_place_s = time_of("out_of_place");
    r.in_place_s = time_of("in_place");
    if (r.seconds() <= 0) fail(at, "no positive time in this result");
    rows.push_back(r);
  });
  if (rows.empty()) fail("/results", "no results");
  // nccl-tests writes its booleans as the strings "true" and "false".
  auto blocking = config.get("blocking_collectives");
  give_run(rows, 0, ranks, on_host,
           {groups, gpus, count("aggregated_iterations", 1), blocking && (blocking->is_boolean() ? blocking->boolean() : blocking->is_string() && blocking->str() == "true")});
  return rows;
}

}  // namespace

std::vector<NcclTestRow> read_nccl_tests(const std::string& text, const std::string& file) {
  if (const size_t first = text.find_first_not_of(" \t\r\n"); first != std::string::npos && (text[first] == '{' || text[first] == '[')) return read_nccl_tests_json(text, file);
  std::optional<Op> op = op_of_test(base_name(file));
  // The result table's columns, from its "# size ..." header: how many
  // words a row has, and where each half's time is. Options of nccl-tests
  // add columns: -I 1 four per-iteration figures after each half, -S 1 a
  // date and a clock after the row (one "timestamp" in the header).
  struct Table {
    int line = 0;
    size_t width = 0;
    std::vector<size_t> times;  // out-of-place, then in-place
  };
  std::optional<Table> table;
  std::vector<NcclTestRow> rows;
  // A file may hold several runs one after the other (logs put together):
  // each "Collective test starting" line or "# nThread" header starts one,
  // and its rows take its own rank count.
  struct Run {
    int line = 1;
    size_t first_row = 0;
    int64_t ranks = 0, threads_gpus = 0, gpus = 1;
    std::map<std::string, int64_t> on_host;  // ranks per host, from the "#  Rank k ... on HOST" lines
    // NCCL_TESTS_SPLIT runs one collective per group of ranks at once
    // ("#  Rank k Group g"): the rows are the first rank's group's, so its
    // ranks and hosts are the ones counted.
    std::optional<int64_t> group;
    std::set<int64_t> groups;
    bool blocking = false;  // a "# Blocking Enabled" line (-z)
    int64_t grouped = 1;    // "agg iters: k" (-m k)
  } run;
  auto end_run = [&] {
    const int64_t ranks = run.ranks ? run.ranks : run.threads_gpus;
    if (rows.size() == run.first_row) return;
    if (ranks < 2) fail_at(run.line, "cannot tell how many ranks ran: no '#  Rank k' lines and no 'nThread T nGpus G' header giving 2 or more");
    if (ranks > kMaxRunRanks) fail_at(run.line, kTooManyRanks);
    give_run(rows, run.first_row, ranks, run.on_host, {static_cast<int64_t>(run.groups.size()), run.gpus, run.grouped, run.blocking});
  };
  // A "Collective test starting" line or an "# nThread" header starts a run.
  auto start_run = [&](int line) {
    end_run();
    run = Run{};
    run.line = line;
    run.first_row = rows.size();
  };
  // With NCCL_DEBUG=INFO, NCCL's messages run into the table and cut rows:
  // the hosts that write them, a row begun before a message and waiting
  // for the rest of its columns, and NCCL's latest pick, which the next row
  // gets.
  std::set<std::string> hosts;
  struct Cut {
    std::vector<std::string> words;
    int line = 0;
  };
  std::optional<Cut> cut_row;
  std::string pick;
  auto refuse_cut_row = [&] {
    if (cut_row) fail_at(cut_row->line, "a row that NCCL's log output cut, and whose times never came (" + std::to_string(cut_row->words.size()) + " of " + std::to_string(table->width) + " columns)");
  };
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Launchers prefix each line: MPI with "[1,0]<stdout>:", srun --label
    // with the task's number ("0: ").
    if (auto k = line.find("<stdout>:"); k != std::string::npos) line = line.substr(k + 9);
    if (size_t d = line.find_first_not_of(' '); d != std::string::npos && std::isdigit(static_cast<unsigned char>(line[d]))) {
      const size_t colon = line.find_first_not_of("0123456789", d);
      if (colon != std::string::npos && line[colon] == ':') line = line.substr(colon + 1);
    }
    // An NCCL message is read for NCCL's pick only; the text before it, if
    // any, is the row it cut.
    bool cut = false;
    if (const LogAt at = nccl_log_at(line, hosts); at.start != std::string::npos) {
      if (line.find_first_not_of(' ') == at.start && hosts.size() < 4096) hosts.insert(line.substr(at.start, at.host_end - at.start));
      if (std::string p = nccl_pick(line.substr(at.start)); !p.empty()) pick = p;
      line.resize(at.start);
      cut = true;
    }
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    if (w[0] == "#") {
      refuse_cut_row();
      if (line.find("Collective test starting:") != std::string::npos) {
        start_run(n);
        op = op_of_test(w.back());
        if (!op) fail_at(n, "unknown collective test '" + w.back() + "'");
      }
      if (w.size() > 2 && w[1] == "Blocking" && w[2] == "Enabled:") run.blocking = true;
      if (w.size() > 2 && w[1] == "Rank") {
        int64_t group = 0;  // nccl-tests before 2.10 print no Group
        if (w.size() > 4 && w[3] == "Group") group = std::atoll(w[4].c_str());
        if (!run.group) run.group = group;
        if (run.groups.size() < 4096) run.groups.insert(group);
        const bool counted = group == *run.group;
        run.ranks += counted;
        for (size_t i = 2; i + 1 < w.size(); ++i)
          if (w[i] == "on") {
            if (counted) ++run.on_host[w[i + 1]];
            if (hosts.size() < 4096) hosts.insert(w[i + 1]);
            break;
          }
      }
      if (w.size() > 1 && w[1] == "nThread") {
        start_run(n);
        // Counts past 2^24 are no run's; bounded, their product cannot
        // overflow.
        auto count = [](const std::string& word) { return std::clamp<int64_t>(std::atoll(word.c_str()), 0, int64_t{1} << 24); };
        int64_t t = 0, g = 0, graph = 0;
        for (size_t i = 1; i + 1 < w.size(); ++i) {
          if (w[i] == "nThread") t = count(w[i + 1]);
          if (w[i] == "nGpus") g = count(w[i + 1]);
          if (w[i] == "graph:") graph = count(w[i + 1]);
          if (w[i] == "agg" && w[i + 1] == "iters:" && i + 2 < w.size()) run.grouped = count(w[i + 2]);
        }
        run.threads_gpus = t * g;
        // Under CUDA graphs ("graph: 1", nccl-tests -G) the thread launches
        // a graph of iterations, not each GPU's part of each: no floor.
        run.gpus = graph > 0 ? 0 : std::max<int64_t>(g, 1);
      }
      if (w.size() > 1 && w[1] == "size") {
        table = Table{n, w.size() - 1 + (w.back() == "timestamp" ? 1 : 0), {}};
        for (size_t i = 1; i < w.size(); ++i) {
          if (w[i] == "time") table->times.push_back(i - 1);
          // -C 1: the host's time to launch an iteration, which ends before
          // the GPUs' work does (the bandwidths still come from the GPUs').
          if (w[i] == "cputime") fail_at(n, "the table's times are the host's ('cputime', nccl-tests -C 1), not the collective's; run it again without -C");
        }
        if (table->times.empty()) fail_at(n, "the table's header names no 'time' column");
      }
      continue;
    }
    // In the table, a line that starts with a number (signed too) is a row;
    // any other is log output that other processes wrote into it.
    const size_t sign = w[0][0] == '-' || w[0][0] == '+' ? 1 : 0;
    if (line[0] == '#' || !table || w[0].size() <= sign || !std::isdigit(static_cast<unsigned char>(w[0][sign]))) continue;
    // A row that NCCL's messages cut: its first part, then the rest of its
    // columns (numbers only) from the lines between the messages, until the
    // table's count is reached.
    int row_line = n;
    if (cut_row) {
      double x = 0;
      if (!std::all_of(w.begin(), w.end(), [&](const std::string& word) { return parse_number(word, x); })) refuse_cut_row();
      cut_row->words.insert(cut_row->words.end(), w.begin(), w.end());
      if (cut_row->words.size() < table->width) continue;
      if (cut_row->words.size() > table->width) fail_at(cut_row->line, "a row that NCCL's log output cut reads " + std::to_string(cut_row->words.size()) + " columns, not the table's " + std::to_string(table->width));
      w = std::move(cut_row->words);
      row_line = cut_row->line;
      cut_row.reset();
    } else if (cut && w.size() < table->width) {
      cut_row = Cut{w, n};
      continue;
    }
    if (!op) fail_at(row_line, "cannot tell the collective: no '# Collective test starting:' line and the file name names none (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, sendrecv_perf)");
    NcclTestRow r;
    r.op = *op;
    r.file = file;
    r.line = row_line;
    r.nccl_pick = std::move(pick);
    pick.clear();
    // A result row reads size, count (whole numbers) and the type's name; a
    // line that does not is a fragment (a row cut by log lines that other
    // processes wrote into the table, as NCCL_DEBUG output can be).
    auto refuse_width = [&] {
      fail_at(row_line, "a row of " + std::to_string(w.size()) + " columns, where rows under the header on line " + std::to_string(table->line) + " have " + std::to_string(table->width));
    };
    if (w.size() < 3) refuse_width();
    double count = 0, type_as_number = 0;
    if (!parse_number(w[0], r.bytes) || r.bytes != std::floor(r.bytes)) fail_at(row_line, "size '" + w[0] + "' is not a whole number of bytes");
    if (!parse_number(w[1], count) || count != std::floor(count) || parse_number(w[2], type_as_number))
      fail_at(row_line, "not a result row (size, count, type, ...): '" + w[0] + " " + w[1] + " " + w[2] + " ...'; is it a fragment cut by other output?");
    // all_gather and reduce_scatter print size-0 rows where the count per
    // rank rounds to nothing: nothing moved, nothing to fit.
    if (r.bytes == 0) continue;
    // A row has the header's columns, or stops where the in-place half
    // would begin (a run cut short after its out-of-place half).
    const bool both = table->times.size() > 1 && w.size() == table->width;
    if (!both && w.size() != (table->times.size() > 1 ? table->times[1] : table->width)) refuse_width();
    const std::string& oop_text = w[table->times[0]];
    double oop = 0, ip = 0;
    if (!parse_number(oop_text, oop)) fail_at(row_line, "out-of-place time '" + oop_text + "' is not a number of microseconds");
    if (both && !parse_number(w[table->times[1]], ip)) fail_at(row_line, "in-place time '" + w[table->times[1]] + "' is not a number of microseconds");
    r.out_of_place_s = oop * 1e-6;
    r.in_place_s = ip * 1e-6;
    if (r.seconds() <= 0) fail_at(row_line, "no positive time on this line");
    rows.push_back(r);
  }
  refuse_cut_row();
  if (rows.empty()) fail_at(n, "no result rows (is this the stdout of an nccl-tests program?)");
  end_run();
  return rows;
}

double model_bytes(const NcclTestRow& r) { return r.bytes; }

std::string machine_mismatch(const AxisLinks& a, const NcclTestRow& r) {
  if (r.hosts == 0) return "";
  const std::string ran = "the run's " + std::to_string(r.ranks) + " ranks are on " + std::to_string(r.hosts) + (r.hosts == 1 ? " host" : " hosts");
  if (r.ranks_per_host == 0) return ran + ", not the same number on each; the model's nodes are all alike";
  if (a.topology != AxisLinks::Topology::hierarchical) {
    if (r.hosts == 1) return "";
    return ran + " (" + std::to_string(r.ranks_per_host) + " each), but the axis is one node (" +
           (a.topology == AxisLinks::Topology::ring ? "ring" : "switch") + "): start from a hierarchical machine (h100-cluster) with group_size " + std::to_string(r.ranks_per_host);
  }
  // A hierarchical axis puts group_size ranks on a node (fewer when the
  // run has fewer ranks in all).
  const int64_t node = std::min(a.group_size, r.ranks);
  if (node == r.ranks_per_host) return "";
  return ran + " (" + std::to_string(r.ranks_per_host) + " each), but the axis puts " + std::to_string(node) + " on a node (group_size " + std::to_string(a.group_size) + ")";
}

NcclChoice model_choice(const AxisLinks& a, const NcclTestRow& r) {
  // sendrecv: each rank sends to the next, priced as thunky-sim prices a
  // collective_permute's pair; past one node the slowest pairs cross to
  // the next node through their NICs.
  if (r.op == Op::collective_permute)
    return with_host_floor(nccl_p2p(a, a.topology == AxisLinks::Topology::hierarchical && r.ranks > a.group_size, r.bytes), a.nccl_params, r.gpus_per_thread);
  return nccl_collective(r.op, a, r.ranks, model_bytes(r), r.gpus_per_thread);
}

double model_seconds(const AxisLinks& a, const NcclTestRow& r) { return model_choice(a, r).seconds(); }

namespace {

// One fitted figure: where it lives in the axis, and its bounds.
struct Knob {
  double* value;
  double lo, hi;
};

double mean_error(const AxisLinks& a, const std::vector<NcclTestRow>& rows, double* worst = nullptr) {
  double sum = 0, max = 0;
  for (const auto& r : rows) {
    const double e = std::fabs(model_seconds(a, r) - r.seconds()) / r.seconds();
    sum += e;
    max = std::max(max, e);
  }
  if (worst) *worst = max;
  return sum / static_cast<double>(rows.size());
}

}  // namespace

FitResult fit_nccl(const AxisLinks& base, const std::vector<NcclTestRow>& rows) {
  FitResult out;
  out.axis = base;
  AxisLinks& a = out.axis;
  a.nccl = true;
  NcclParams& q = a.nccl_params;
  bool nvls_used = false, multinode = false, copies = false, ring_reductions = false;
  std::set<int64_t> step_counts;
  for (const auto& r : rows) {
    const bool nvls = r.op == Op::all_reduce && q.nvls_bandwidth > 0 && r.ranks >= q.nvls_min_ranks;
    nvls_used |= nvls;
    copies |= r.op == Op::all_gather || r.op == Op::all_to_all;
    ring_reductions |= r.op == Op::reduce_scatter || (r.op == Op::all_reduce && !nvls);
    multinode |= base.topology == AxisLinks::Topology::hierarchical && r.ranks > base.group_size;
    step_counts.insert(r.op == Op::collective_permute ? 1 : r.op == Op::all_reduce ? 2 * (r.ranks - 1) : r.ranks - 1);
  }
  std::vector<Knob> knobs;
  // The overhead is paid once and the step latencies once a step: only
  // runs of two or more step counts (all_reduce's 2(n-1) beside
  // all_gather's n-1, or two GPU counts) tell them apart. Runs of one keep
  // the base's overhead, and the step latencies take the rest.
  if (step_counts.size() > 1) knobs.push_back({&q.overhead_s, 0, 1e-3});
  // Runs in which one thread drives several GPUs (nccl-tests -g k) take
  // no less per iteration than the host needs to issue each GPU's part;
  // the host's time per GPU starts where the flattest run would put it.
  double least_per_gpu = std::numeric_limits<double>::infinity();
  for (const auto& r : rows)
    if (r.gpus_per_thread > 1) least_per_gpu = std::min(least_per_gpu, r.seconds() / static_cast<double>(r.gpus_per_thread));
  if (std::isfinite(least_per_gpu)) {
    if (q.host_launch_s <= 0) q.host_launch_s = 0.9 * least_per_gpu;
    knobs.push_back({&q.host_launch_s, 0, 1e-3});
  }
  for (auto& p : q.ring) {
    knobs.push_back({&p.step_latency_s, 0, 1e-3});
    knobs.push_back({&p.efficiency, 1e-3, 1});
  }
  if (nvls_used) {
    // NCCL's pick keeps the base model's NVLS figure: the fit finds what
    // NVLS achieves, not what NCCL's tuner expects of it.
    if (q.nvls_tuner_bandwidth <= 0) q.nvls_tuner_bandwidth = q.nvls_bandwidth;
    knobs.push_back({&q.nvls_bandwidth, 1e9, 1e13});
    knobs.push_back({&q.nvls_latency_s, 0, 1e-3});
  }
  // Copy collectives' own factor, where reducing ones that run a ring at
  // large sizes pin the ring's figures (an all_reduce that NVLS serves
  // there does not: the factor would then stand in for the ring itself).
  if (copies && ring_reductions) knobs.push_back({&q.copy_factor, 0.5, 2});
  if (multinode)
    for (auto& p : q.network) {
      knobs.push_back({&p.step_latency_s, 0, 1e-2});
      knobs.push_back({&p.efficiency, 1e-3, 1});
    }
  // Random search in log space, one figure at a time: wide steps first, to
  // cross from one of NCCL's picks to another, then narrower ones to
  // settle. Where NCCL switches algorithm or protocol makes the error jump,
  // so a search can stop in a poor valley: it runs from the base figures
  // and from three starts scattered around them, and keeps the best. A
  // fixed seed makes it repeatable.
  std::mt19937_64 rng(20261202);
  std::uniform_int_distribution<size_t> pick(0, knobs.size() - 1);
  auto clamp = [](const Knob& k, double v) { return std::clamp(v, k.lo > 0 ? k.lo : 1e-9, k.hi); };
  for (auto& k : knobs)
    if (*k.value <= 0) *k.value = k.lo > 0 ? k.lo : 1e-7;
  const std::vector<double> start = [&] {
    std::vector<double> v;
    for (const auto& k : knobs) v.push_back(*k.value);
    return v;
  }();
  std::vector<double> best_values = start;
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 4; ++run) {
    std::normal_distribution<double> scatter(0.0, 1.0);
    for (size_t i = 0; i < knobs.size(); ++i) *knobs[i].value = run == 0 ? start[i] : clamp(knobs[i], start[i] * std::exp(scatter(rng)));
    double e_run = mean_error(a, rows);
    for (int it = 0; it < 30000; ++it) {
      std::normal_distribution<double> step(0.0, it < 10000 ? 0.4 : it < 20000 ? 0.15 : 0.05);
      Knob& k = knobs[pick(rng)];
      const double old = *k.value;
      *k.value = clamp(k, old * std::exp(step(rng)));
      const double e = mean_error(a, rows);
      if (e < e_run) e_run = e;
      else *k.value = old;
    }
    if (e_run < best) {
      best = e_run;
      for (size_t i = 0; i < knobs.size(); ++i) best_values[i] = *knobs[i].value;
    }
  }
  for (size_t i = 0; i < knobs.size(); ++i) *knobs[i].value = best_values[i];
  out.mean_abs_error = mean_error(a, rows, &out.max_abs_error);
  return out;
}

}  // namespace thunky::sim
