#include "tools/sharding.h"

#include <algorithm>
#include <cctype>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/dtype.h"

namespace thunky::gen {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxDevices = 65536;
constexpr size_t kMaxAxes = 8;
constexpr double kMaxElements = 1099511627776.0;  // 2^40, the loader's limit on one array

[[noreturn]] void bad(const std::string& message) { throw std::invalid_argument(message); }

std::string trim(std::string s, const std::string& also = "") {
  const std::string drop = " \t\n\r" + also;
  const size_t b = s.find_first_not_of(drop);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(drop) - b + 1);
}

// Splits at commas outside parentheses.
std::vector<std::string> split_top(const std::string& s, const std::string& what) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char ch : s) {
    if (ch == '(') ++depth;
    if (ch == ')' && --depth < 0) bad(what + ": unbalanced parentheses in '" + s + "'");
    if (ch == ',' && depth == 0) out.emplace_back();
    else out.back() += ch;
  }
  if (depth != 0) bad(what + ": unbalanced parentheses in '" + s + "'");
  return out;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

int64_t parse_positive(const std::string& text, int64_t max, const std::string& what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) bad(what + ": '" + text + "' is not a positive integer");
  const int64_t v = text.size() > 12 ? max + 1 : std::stoll(text);
  if (v < 1 || v > max) bad(what + ": " + text + " is out of range (1.." + std::to_string(max) + ")");
  return v;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string axes_text(const DimAxes& axes) { return axes.empty() ? "(none)" : join(axes, "+"); }

bool has(const DimAxes& axes, const std::string& a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); }

DimAxes concat(DimAxes a, const DimAxes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// True when `prefix` is the start of `axes`; then `rest` is what follows.
bool starts_with(const DimAxes& axes, const DimAxes& prefix, DimAxes* rest = nullptr) {
  if (prefix.size() > axes.size() || !std::equal(prefix.begin(), prefix.end(), axes.begin())) return false;
  if (rest) rest->assign(axes.begin() + static_cast<long>(prefix.size()), axes.end());
  return true;
}

ojson spec_json(const PartitionSpec& spec) {
  ojson j = ojson::array();
  for (const auto& axes : spec) {
    if (axes.empty()) j.push_back(nullptr);
    else if (axes.size() == 1) j.push_back(axes[0]);
    else j.push_back(axes);
  }
  return j;
}

ojson axis_json(const DimAxes& axes) { return axes.size() == 1 ? ojson(axes[0]) : ojson(axes); }

// This rank's block index along `axes` as an integer expression of the
// mesh axis names (row-major, first axis slowest).
std::string block_index(const MeshAxes& mesh, const DimAxes& axes) {
  std::string e;
  for (const auto& a : axes) e = e.empty() ? a : "(" + e + ") * " + std::to_string(mesh.size_of({a})) + " + " + a;
  return e.empty() ? "0" : e;
}

std::string human_bytes(double b) {
  std::ostringstream s;
  s << std::setprecision(3);
  if (b >= 1e9) s << b / 1e9 << " GB";
  else if (b >= 1e6) s << b / 1e6 << " MB";
  else if (b >= 1e3) s << b / 1e3 << " kB";
  else s << b << " B";
  return s.str();
}

std::string shape_text(const std::string& dtype, const std::vector<int64_t>& shape) {
  std::string s = dtype + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Builds the schedule step by step, remembering what it did.
class Builder {
 public:
  Builder(const MatmulProblem& p, MatmulPlan& plan) : p_(p), plan_(plan), es_(dtype_size(*parse_dtype(p.dtype))) {}

  void scratch(const std::string& name, int64_t rows, int64_t cols) {
    buffers_[name] = {{"shape", {rows, cols}}, {"dtype", p_.dtype}, {"role", "scratch"}};
  }

  void collective(const std::string& op, const std::string& name, const std::string& what, const DimAxes& axes,
                  const std::string& src, const std::string& dst, int64_t bytes) {
    ojson c = {{"op", op}, {"name", name}, {"src", src}, {"dst", dst}, {"axis", axis_json(axes)}};
    program_.push_back(c);
    plan_.collectives.push_back({op, name, what, axes, bytes * static_cast<int64_t>(es_)});
  }

  void gemm(const std::string& name, const std::string& a, const std::string& b, const std::string& c, bool accumulate) {
    ojson g = {{"op", "gemm"}, {"name", name}, {"a", a}, {"b", b}, {"c", c}};
    if (accumulate) g["beta"] = 1.0;
    program_.push_back(g);
  }

  void copy(const std::string& name, const std::string& src, const std::string& dst) {
    program_.push_back({{"op", "copy"}, {"name", name}, {"src", src}, {"dst", dst}});
  }

  ojson finish(ojson buffers_in) {
    for (auto& [k, v] : buffers_.items()) buffers_in[k] = v;
    ojson s;
    s["format"] = "thunky.sched/1";
    s["name"] = "sharded_matmul";
    ojson mesh = {{"axis_names", p_.mesh.names}, {"shape", p_.mesh.sizes}};
    s["mesh"] = mesh;
    s["buffers"] = buffers_in;
    s["program"] = program_;
    return s;
  }

 private:
  const MatmulProblem& p_;
  MatmulPlan& plan_;
  size_t es_;
  ojson buffers_ = ojson::object();
  ojson program_ = ojson::array();
};

void check_divisible(const MeshAxes& mesh, const std::vector<int64_t>& shape, const PartitionSpec& spec, const std::string& what) {
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t n = mesh.size_of(spec[d]);
    if (shape[d] % n != 0)
      bad(what + ": dimension " + std::to_string(d) + " (" + std::to_string(shape[d]) + ") is not divisible by " +
          axes_text(spec[d]) + " = " + std::to_string(n) + " devices");
  }
}

}  // namespace

int64_t MeshAxes::devices() const {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

int64_t MeshAxes::size_of(const std::vector<std::string>& axes) const {
  int64_t n = 1;
  for (const auto& a : axes)
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == a) n *= sizes[i];
  return n;
}

MeshAxes parse_mesh(const std::string& text) {
  std::string t = trim(text);
  if (!t.empty() && t.front() == '{') {
    if (t.back() != '}') bad("--mesh: '" + text + "' opens a brace it does not close");
    t = t.substr(1, t.size() - 2);
  }
  MeshAxes m;
  for (const std::string& item : split_top(t, "--mesh")) {
    const size_t sep = item.find_first_of("=:");
    if (sep == std::string::npos) bad("--mesh: '" + trim(item) + "' is not NAME=SIZE (as in X=4,Y=2 or {'X': 4, 'Y': 2})");
    const std::string name = trim(item.substr(0, sep), "'\"");
    if (!is_identifier(name) || name == "None" || name == "ds" || name == "min" || name == "max")
      bad("--mesh: '" + name + "' is not a usable axis name (letters, digits and _, not None, ds, min or max)");
    if (has(m.names, name)) bad("--mesh: axis " + name + " is named twice");
    m.names.push_back(name);
    m.sizes.push_back(parse_positive(trim(item.substr(sep + 1)), kMaxDevices, "--mesh: axis " + name));
  }
  if (m.names.size() > kMaxAxes) bad("--mesh: at most " + std::to_string(kMaxAxes) + " axes");
  int64_t n = 1;
  for (auto s : m.sizes)
    if ((n *= s) > kMaxDevices) bad("--mesh: more than " + std::to_string(kMaxDevices) + " devices");
  return m;
}

PartitionSpec parse_spec(const std::string& text, const MeshAxes& mesh, size_t rank, const std::string& what) {
  std::string t = trim(text);
  for (const char* wrap : {"PartitionSpec(", "P("})
    if (t.rfind(wrap, 0) == 0 && !t.empty() && t.back() == ')') t = t.substr(std::string(wrap).size(), t.size() - std::string(wrap).size() - 1);
  PartitionSpec spec;
  DimAxes used;
  for (std::string entry : split_top(t, what)) {
    entry = trim(entry);
    DimAxes axes;
    if (entry.size() >= 2 && entry.front() == '(' && entry.back() == ')') entry = entry.substr(1, entry.size() - 2);
    if (trim(entry, "'\"") != "None" && !trim(entry).empty()) {
      for (char& c : entry)
        if (c == ',') c = '+';
      std::stringstream parts(entry);
      std::string a;
      while (std::getline(parts, a, '+')) {
        a = trim(a, "'\"");
        if (a.empty()) continue;
        if (!has(mesh.names, a)) bad(what + ": unknown mesh axis '" + a + "' (the mesh has " + join(mesh.names, ", ") + ")");
        if (has(used, a)) bad(what + ": axis " + a + " shards two dimensions (or one twice); each mesh axis may appear once in a spec");
        used.push_back(a);
        axes.push_back(a);
      }
    } else if (trim(entry).empty() && t.empty()) {
      break;  // "" is P() only when there is nothing at all
    }
    spec.push_back(axes);
  }
  if (spec.size() != rank)
    bad(what + ": '" + text + "' has " + std::to_string(spec.size()) + " entries for a " + std::to_string(rank) +
        "-D operand; give one per dimension (None for a replicated one)");
  return spec;
}

std::vector<int64_t> parse_shape(const std::string& text, const std::string& what) {
  std::vector<int64_t> shape;
  std::stringstream parts(trim(text));
  std::string d;
  while (std::getline(parts, d, 'x')) shape.push_back(parse_positive(trim(d), kMaxDim, what + " dimension"));
  if (shape.size() != 2) bad(what + ": '" + text + "' is not a 2-D shape such as 8192x28672");
  return shape;
}

std::string spec_notation(const std::string& array, const std::string& dims, const PartitionSpec& spec, const DimAxes& unreduced) {
  std::string s = array + "[";
  for (size_t d = 0; d < spec.size(); ++d) {
    s += (d ? ", " : "") + std::string(1, dims[d]);
    if (spec[d].size() == 1) s += "_" + spec[d][0];
    else if (!spec[d].empty()) s += "_{" + join(spec[d], "") + "}";
  }
  s += "]";
  if (!unreduced.empty()) s += "{U_" + join(unreduced, "") + "}";
  return s;
}

MatmulPlan plan_matmul(const MatmulProblem& p) {
  if (!parse_dtype(p.dtype)) bad("--dtype: unknown element type '" + p.dtype + "'");
  if (p.lhs.size() != 2 || p.rhs.size() != 2) bad("A and B must be 2-D");
  if (p.lhs[1] != p.rhs[0])
    bad("the contracting dimensions differ: A is " + shape_text(p.dtype, p.lhs) + " and B " + shape_text(p.dtype, p.rhs));
  const MeshAxes& mesh = p.mesh;
  for (const auto& [what, shape] : {std::pair{"A", p.lhs}, std::pair{"B", p.rhs}, std::pair{"C", std::vector<int64_t>{p.lhs[0], p.rhs[1]}}})
    if (static_cast<double>(shape[0]) * static_cast<double>(shape[1]) > kMaxElements)
      bad(std::string(what) + " " + shape_text(p.dtype, shape) + " has more than 2^40 elements, the most one array may have");
  check_divisible(mesh, p.lhs, p.lhs_spec, "--lhs-spec");
  check_divisible(mesh, p.rhs, p.rhs_spec, "--rhs-spec");

  MatmulPlan plan;
  plan.problem = p;
  std::vector<std::string> text;
  const int64_t I = p.lhs[0], J = p.lhs[1], K = p.rhs[1];
  DimAxes a_i = p.lhs_spec[0], a_j = p.lhs_spec[1], b_j = p.rhs_spec[0], b_k = p.rhs_spec[1];
  Builder build(p, plan);

  // The schedule declares A and B as the user shards them, except that the
  // reduce strategy slices a replicated operand along J (free: every device
  // already holds all of it).
  plan.is_case2_single = a_j.empty() != b_j.empty();
  if (plan.is_case2_single) {
    const DimAxes& s = a_j.empty() ? b_j : a_j;
    const DimAxes& other = a_j.empty() ? a_i : b_k;
    plan.reduce_possible = std::none_of(s.begin(), s.end(), [&](const std::string& a) { return has(other, a); });
    if (p.strategy == Strategy::reduce) {
      if (!plan.reduce_possible)
        bad("--strategy reduce: the replicated operand cannot be sliced along J over " + axes_text(s) + ", which already shards its other dimension");
      (a_j.empty() ? a_j : b_j) = s;
      text.push_back(std::string("case 2, reduce strategy: ") + (p.lhs_spec[1].empty() ? "A" : "B") +
                     " is replicated on J: slice it along J over " + axes_text(s) + " (no communication), then multiply and reduce as in case 3");
    }
  }
  plan.a_spec = {a_i, a_j};
  plan.b_spec = {b_j, b_k};

  // Local names and shapes as the plan moves along.
  std::string a_ref = "a", b_ref = "b";
  int64_t a_rows = I / mesh.size_of(a_i), a_cols = J / mesh.size_of(a_j);
  int64_t b_rows = J / mesh.size_of(b_j), b_cols = K / mesh.size_of(b_k);

  // Case 4: both non-contracting dimensions sharded over one axis. Gather A
  // along I (its leading dimension) over the shared axes, or over all of
  // I's axes when the shared ones are not the minor end of them.
  DimAxes shared;
  for (const auto& a : a_i)
    if (has(b_k, a)) shared.push_back(a);
  if (!shared.empty()) {
    plan.case_number = 4;
    DimAxes keep, gather = shared;
    const bool suffix = a_i.size() >= shared.size() && std::equal(shared.begin(), shared.end(), a_i.end() - static_cast<long>(shared.size()));
    if (suffix) keep.assign(a_i.begin(), a_i.end() - static_cast<long>(shared.size()));
    else gather = a_i;
    const int64_t g = mesh.size_of(gather);
    build.scratch("a_rows", a_rows * g, a_cols);
    build.collective("all_gather", "all_gather A along I", "A along I", gather, a_ref, "a_rows", a_rows * g * a_cols);
    text.push_back("case 4: A's I and B's K are both sharded over " + axes_text(shared) +
                   ", which would give C[I, K] two shardings over one axis: AllGather A along I over " + axes_text(gather) + " first");
    a_ref = "a_rows";
    a_rows *= g;
    a_i = keep;
  }

  // The contracting dimension.
  bool a_in_blocks = false;
  int64_t a_blocks = 1;
  DimAxes unreduced;
  if (a_j.empty() && b_j.empty()) {
    if (plan.case_number != 4) plan.case_number = 1;
    text.push_back("case 1: neither operand is sharded on the contracting dimension J: multiply the local shards, no communication");
  } else if (a_j == b_j) {
    if (plan.case_number != 4) plan.case_number = text.empty() ? 3 : 2;
    unreduced = a_j;
    text.push_back("case 3: both operands are sharded on J over " + axes_text(a_j) +
                   ": multiply the local shards, leaving partial sums of C over " + axes_text(a_j) + ", then reduce them");
  } else {
    if (plan.case_number != 4) plan.case_number = 2;
    std::string t = "case 2: ";
    if (!a_j.empty()) {
      // A gathered along J, its second dimension: all_gather concatenates
      // along the leading one, so A arrives as blocks [J-block t][I, J/n]
      // and C accumulates one GEMM per block (beta = 1).
      a_blocks = mesh.size_of(a_j);
      build.scratch("a_blocks", a_rows * a_blocks, a_cols);
      build.collective("all_gather", "all_gather A along J", "A along J", a_j, a_ref, "a_blocks", a_rows * a_blocks * a_cols);
      t += "A is sharded on J over " + axes_text(a_j) + ": AllGather it (as " + std::to_string(a_blocks) + " blocks of J)";
      a_ref = "a_blocks";
      a_in_blocks = true;
    }
    if (!b_j.empty()) {
      const int64_t g = mesh.size_of(b_j);
      build.scratch("b_full", b_rows * g, b_cols);
      build.collective("all_gather", "all_gather B along J", "B along J", b_j, b_ref, "b_full", b_rows * g * b_cols);
      t += std::string(a_in_blocks ? "; " : "") + "B is sharded on J over " + axes_text(b_j) + ": AllGather it";
      b_ref = "b_full";
      b_rows *= g;
    }
    text.push_back(t + ", then multiply");
  }
  plan.unreduced = unreduced;

  // Where C's local product lands, and what it becomes.
  DimAxes out_i = a_i, out_k = b_k;
  if (p.out_spec) {
    out_i = (*p.out_spec)[0];
    out_k = (*p.out_spec)[1];
    for (const auto& a : unreduced)
      if (has(out_k, a)) bad("--out-spec: reducing C into K sharded over " + a + " needs a transpose, which sched.json has no op for; shard I instead");
    if (out_k != b_k)
      bad("--out-spec: thunky-gen reshards C along its first dimension (I) only; its second must stay " +
          std::string(b_k.empty() ? "replicated (None)" : "sharded over " + axes_text(b_k)) + " as B leaves it");
    check_divisible(mesh, {I, K}, *p.out_spec, "--out-spec");
  }
  plan.c_spec = {out_i, out_k};
  const int64_t c_rows = a_rows, c_cols = b_cols;
  const int64_t out_rows = I / mesh.size_of(out_i);
  // The product goes straight into c when nothing follows it, or when only
  // an AllReduce does (out of place, into c).
  const bool direct = unreduced.empty() && out_i == a_i;
  const bool reduce_into_c = !unreduced.empty() && out_i == a_i;
  const std::string product = direct ? "c" : "c_partial";
  if (!direct) build.scratch("c_partial", c_rows, c_cols);

  // The local GEMM.
  if (a_in_blocks) {
    for (int64_t t = 0; t < a_blocks; ++t)
      build.gemm("GEMM block " + std::to_string(t),
                 "a_blocks[ds(" + std::to_string(t * c_rows) + ", " + std::to_string(c_rows) + ")]",
                 b_ref + "[ds(" + std::to_string(t * a_cols) + ", " + std::to_string(a_cols) + ")]", product, t > 0);
  } else {
    build.gemm("GEMM", a_ref, b_ref, product, false);
  }
  plan.gemm_shape = {c_rows, a_cols * a_blocks, c_cols};
  plan.flops_per_device = 2.0 * static_cast<double>(c_rows) * static_cast<double>(a_cols * a_blocks) * static_cast<double>(c_cols);

  // Reduce the partial sums: ReduceScatter when the output shards I over
  // them (as the minor axes), else AllReduce.
  DimAxes cur_i = a_i;
  std::string cur = product;
  if (!unreduced.empty()) {
    if (out_i == concat(a_i, unreduced)) {
      build.collective("reduce_scatter", "reduce_scatter C", "C", unreduced, cur, "c", c_rows * c_cols);
      text.push_back("ReduceScatter C over " + axes_text(unreduced) + " along I, as --out-spec keeps it sharded");
      cur = "c";
      cur_i = out_i;
    } else {
      const std::string dst = reduce_into_c ? "c" : cur;
      build.collective("all_reduce", "all_reduce C", "C", unreduced, cur, dst, c_rows * c_cols);
      text.push_back("AllReduce C over " + axes_text(unreduced));
      cur = dst;
    }
  }

  // Reshard I: slice the block this device keeps, or gather the axes it drops.
  if (cur != "c") {
    DimAxes rest;
    if (cur_i == out_i) {
      build.copy("C", cur, "c");
    } else if (starts_with(out_i, cur_i, &rest)) {
      build.copy("slice C", cur + "[ds((" + block_index(mesh, rest) + ") * " + std::to_string(out_rows) + ", " + std::to_string(out_rows) + ")]", "c");
      text.push_back("keep this device's block of C along I over " + axes_text(rest) + " (a local slice)");
    } else if (starts_with(cur_i, out_i, &rest)) {
      build.collective("all_gather", "all_gather C along I", "C along I", rest, cur, "c", out_rows * c_cols);
      text.push_back("AllGather C along I over " + axes_text(rest));
    } else {
      build.scratch("c_rows", I, c_cols);
      build.collective("all_gather", "all_gather C along I", "C along I", cur_i, cur, "c_rows", I * c_cols);
      build.copy("slice C", "c_rows[ds((" + block_index(mesh, out_i) + ") * " + std::to_string(out_rows) + ", " + std::to_string(out_rows) + ")]", "c");
      text.push_back("AllGather C along I over " + axes_text(cur_i) + ", then keep the block over " + axes_text(out_i));
    }
  }
  plan.case_text = join(text, "\n");

  auto declared = [&](const std::vector<int64_t>& global, const PartitionSpec& spec, int seed) {
    ojson b = {{"shape", {global[0] / mesh.size_of(spec[0]), global[1] / mesh.size_of(spec[1])}}, {"dtype", p.dtype}, {"role", "input"},
               {"init", {{"kind", "uniform"}, {"low", -1.0}, {"high", 1.0}, {"seed", seed}}},
               {"global", {{"shape", global}, {"spec", spec_json(spec)}}}};
    return b;
  };
  ojson buffers;
  buffers["a"] = declared(p.lhs, plan.a_spec, 1);
  buffers["b"] = declared(p.rhs, plan.b_spec, 2);
  buffers["c"] = {{"shape", {out_rows, K / mesh.size_of(out_k)}}, {"dtype", p.dtype}, {"role", "output"},
                  {"global", {{"shape", {I, K}}, {"spec", spec_json(plan.c_spec)}}}};
  plan.schedule = build.finish(buffers);
  plan.schedule["description"] = spec_notation("A", "IJ", p.lhs_spec) + " . " + spec_notation("B", "JK", p.rhs_spec) + " -> " +
                                 spec_notation("C", "IK", plan.c_spec) + ": " + join(text, "; ") + ".";
  return plan;
}

void describe_plan(const MatmulPlan& plan, std::ostream& out, const std::map<std::string, double>& seconds) {
  auto time_of = [&](const std::string& name) {
    auto it = seconds.find(name);
    if (it == seconds.end()) return std::string();
    std::ostringstream t;
    t << std::setprecision(4) << ", " << (it->second >= 1e-3 ? it->second * 1e3 : it->second * 1e6) << (it->second >= 1e-3 ? " ms" : " us");
    return t.str();
  };
  const MatmulProblem& p = plan.problem;
  const MeshAxes& mesh = p.mesh;
  const size_t es = dtype_size(*parse_dtype(p.dtype));
  out << "mesh";
  for (size_t i = 0; i < mesh.names.size(); ++i) out << (i ? ", " : " ") << mesh.names[i] << "=" << mesh.sizes[i];
  out << " (" << mesh.devices() << " devices)\n";
  auto operand = [&](const std::string& name, const std::string& dims, const std::vector<int64_t>& shape, const PartitionSpec& spec) {
    const std::vector<int64_t> local = {shape[0] / mesh.size_of(spec[0]), shape[1] / mesh.size_of(spec[1])};
    const int64_t copies = mesh.devices() / (mesh.size_of(spec[0]) * mesh.size_of(spec[1]));
    out << "  " << spec_notation(name, dims, spec) << " " << shape_text(p.dtype, shape) << ": shard " << shape_text(p.dtype, local) << ", "
        << human_bytes(static_cast<double>(local[0] * local[1]) * static_cast<double>(es)) << " per device, " << copies
        << (copies == 1 ? " copy" : " copies") << " of each shard\n";
    if (mesh.devices() > 64) return;
    // Which devices hold each block [i, j], i and j the block indices along the two dimensions.
    std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> holders;
    for (int64_t r = 0; r < mesh.devices(); ++r) {
      int64_t rest = r;
      std::map<std::string, int64_t> coord;
      for (size_t a = mesh.names.size(); a-- > 0;) {
        coord[mesh.names[a]] = rest % mesh.sizes[a];
        rest /= mesh.sizes[a];
      }
      auto index = [&](const DimAxes& axes) {
        int64_t b = 0;
        for (const auto& a : axes) b = b * mesh.size_of({a}) + coord[a];
        return b;
      };
      holders[{index(spec[0]), index(spec[1])}].push_back(r);
    }
    out << "    blocks:";
    for (const auto& [block, ranks] : holders) {
      out << " " << name << "[" << block.first << "," << block.second << "] on ";
      for (size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
      out << ";";
    }
    out << "\n";
  };
  out << "operands (as the schedule declares them):\n";
  operand("A", "IJ", p.lhs, plan.a_spec);
  operand("B", "JK", p.rhs, plan.b_spec);
  operand("C", "IK", {p.lhs[0], p.rhs[1]}, plan.c_spec);
  if (plan.a_spec != p.lhs_spec || plan.b_spec != p.rhs_spec)
    out << "  (strategy reduce: the replicated operand is sliced along J, which costs no communication)\n";
  out << plan.case_text << "\n";
  out << "collectives:";
  if (plan.collectives.empty()) out << " none";
  out << "\n";
  for (const auto& c : plan.collectives)
    out << "  " << c.op << " of " << c.what << " over " << axes_text(c.axes) << ": " << human_bytes(static_cast<double>(c.bytes)) << " per device"
        << time_of(c.name) << "\n";
  out << "local GEMM: [" << plan.gemm_shape[0] << ", " << plan.gemm_shape[1] << "] x [" << plan.gemm_shape[1] << ", " << plan.gemm_shape[2]
      << "], " << std::setprecision(4) << plan.flops_per_device / 1e9 << " GFLOP per device" << time_of("GEMM") << "\n";
}

}  // namespace thunky::gen
