#include "core/schedule.h"

#include "core/json_reader.h"
#include "core/lower.h"
#include "core/ops/op_io.h"
#include "core/recent_table.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <unordered_map>

namespace thunky {

namespace {

using namespace json_reader;

std::vector<int64_t> int_list(Value j, const std::string& ptr) {
  if (!j.is_array()) fail(ptr, "expected a list of integers, got " + type_name(j));
  std::vector<int64_t> v;
  v.reserve(j.size());
  j.each_element([&](size_t i, Value e) { v.push_back(as_int(e, child(ptr, i))); });
  return v;
}

std::vector<int64_t> shape_of(Value j, const std::string& ptr) {
  auto s = int_list(j, ptr);
  int64_t total = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0) fail(child(ptr, i), "negative dimension " + std::to_string(s[i]));
    if (s[i] > 0 && total > (int64_t{1} << 40) / s[i]) fail(ptr, "shape " + shape_str(s) + " is too large (more than 2^40 elements)");
    total *= s[i];
  }
  return s;
}

// Parsed refs and map expressions, shared by equal texts during one parse.
// Schedules name the same few views over and over, and many once each (a
// step's slice): the texts parsed most recently are kept (RecentTable),
// looked up by the document's string_view. The parse in progress on this
// thread has one (read_program installs it); `texts` receives the refs'
// JSON pointers.
struct ParseCache {
  RecentTable<std::shared_ptr<const RefSyntax>> refs;
  RecentTable<ExprPtr> exprs;
  TextArena* texts = nullptr;
  int64_t commands = 0;  // in the blocks met so far (kMaxLoweredCommands)
};
thread_local ParseCache* t_cache = nullptr;

// The ref at base/key (/index), its JSON pointer kept in the parse's
// texts. Its buffer is bound by lower().
Ref ref_of(Value j, std::string_view base, std::string_view key, std::optional<size_t> index = std::nullopt) {
  const std::string_view ptr = t_cache->texts->pointer(base, key, index);
  if (!j.is_string()) fail(std::string(ptr), "expected a ref string such as \"a[2:4]\", got " + type_name(j));
  const std::string_view text = j.str();
  try {
    return Ref{.syntax = t_cache->refs.get(text, [&] { return std::make_shared<const RefSyntax>(parse_ref(text)); }), .pointer = ptr};
  } catch (const ThunkyError& e) {
    fail(e.pointer().empty() ? std::string(ptr) : e.pointer(), e.what());
  }
}

void flatten_values(Value j, const std::string& ptr, std::vector<double>& out) {
  if (j.is_array()) {
    j.each_element([&](size_t i, Value e) { flatten_values(e, child(ptr, i), out); });
  } else if (j.is_number()) {
    out.push_back(finite_number(j, ptr));
  } else if (j.is_boolean()) {
    out.push_back(j.boolean() ? 1.0 : 0.0);
  } else {
    fail(ptr, "expected a number, got " + type_name(j));
  }
}

// A memset's 32-bit pattern: an integer from 0 to 2^32 - 1, or a string of
// up to 8 hex digits after "0x" ("0x7fc00000").
uint32_t parse_bits(Value j, const std::string& ptr) {
  const char* expected = "expected a 32-bit pattern: an integer from 0 to 4294967295 or a hex string such as \"0x7fc00000\"";
  if (j.is_string()) {
    const std::string_view t = j.str();
    if (t.size() < 3 || t.size() > 10 || t[0] != '0' || (t[1] != 'x' && t[1] != 'X')) fail(ptr, expected);
    uint32_t bits = 0;
    auto [end, ec] = std::from_chars(t.data() + 2, t.data() + t.size(), bits, 16);
    if (ec != std::errc() || end != t.data() + t.size()) fail(ptr, expected);
    return bits;
  }
  if (!j.is_number_integer()) fail(ptr, expected);
  const int64_t v = as_int(j, ptr);
  if (v < 0 || v > 0xffffffffLL) fail(ptr, expected);
  return static_cast<uint32_t>(v);
}

Init parse_init(Value j, const std::string& ptr) {
  Obj o(j, ptr);
  Init in;
  std::string kind = o.str("kind");
  if (kind == "zeros") in.kind = Init::Kind::zeros;
  else if (kind == "ones") in.kind = Init::Kind::ones;
  else if (kind == "iota") in.kind = Init::Kind::iota;
  else if (kind == "constant") {
    in.kind = Init::Kind::constant;
    Value v = o.need("value");
    if (!v.is_number() && !v.is_boolean()) fail(o.at("value"), "expected a number");
    in.value = v.is_boolean() ? (v.boolean() ? 1 : 0) : finite_number(v, o.at("value"));
  } else if (kind == "values") {
    in.kind = Init::Kind::values;
    flatten_values(o.need("values"), o.at("values"), in.values);
  } else if (kind == "uniform") {
    in.kind = Init::Kind::uniform;
    in.low = o.num_or("low", 0.0);
    in.high = o.num_or("high", 1.0);
    if (auto s = o.get("seed")) in.seed = static_cast<uint64_t>(as_int(*s, o.at("seed")));
  } else if (kind == "normal") {
    in.kind = Init::Kind::normal;
    if (auto s = o.get("seed")) in.seed = static_cast<uint64_t>(as_int(*s, o.at("seed")));
  } else if (kind == "axis_index") {
    in.kind = Init::Kind::axis_index;
    in.axis = o.str("axis");
  } else if (kind == "npy") {
    in.kind = Init::Kind::npy;
    in.path = o.str("path");
    if (auto d = o.get("dtype")) {
      if (!d->is_string()) fail(o.at("dtype"), "expected a dtype name such as \"bf16\"");
      in.bits = parse_dtype(d->str());
      if (!in.bits) fail(o.at("dtype"), "unknown dtype '" + std::string(d->str()) + "'");
    }
  } else {
    fail(o.at("kind"), "unknown init kind '" + kind + "' (expected zeros, ones, iota, constant, values, uniform, normal, axis_index or npy)");
  }
  o.done();
  return in;
}

Buffer parse_buffer(const std::string& name, Value j, const std::string& ptr) {
  Obj o(j, ptr);
  Buffer b;
  b.name = name;
  b.pointer = ptr;
  b.shape = shape_of(o.need("shape"), o.at("shape"));
  std::string dt = o.str("dtype");
  auto t = parse_dtype(dt);
  if (!t) fail(o.at("dtype"), "unknown dtype '" + dt + "' (expected one of f64 f32 f16 bf16 f8e4m3 f8e5m2 s64 s32 s16 s8 u32 u8 bool)");
  b.dtype = *t;
  std::string role = o.str_or("role", "scratch");
  if (role == "input") b.role = Role::input;
  else if (role == "inout") b.role = Role::inout;
  else if (role == "output") b.role = Role::output;
  else if (role == "scratch") b.role = Role::scratch;
  else fail(o.at("role"), "unknown role '" + role + "' (expected input, inout, output or scratch)");
  if (auto in = o.get("init")) {
    if (b.role != Role::input && b.role != Role::inout)
      fail(o.at("init"), "init is only allowed on input and inout buffers (this one is " + role + ")");
    b.init = parse_init(*in, o.at("init"));
  } else if (b.role == Role::input || b.role == Role::inout) {
    fail(ptr, "an " + role + " buffer needs an 'init'");
  }
  if (auto g = o.get("global")) {
    Obj go(*g, o.at("global"));
    GlobalLayout gl;
    gl.shape = shape_of(go.need("shape"), go.at("shape"));
    Value spec = go.need("spec");
    if (!spec.is_array()) fail(go.at("spec"), "expected a PartitionSpec list such as [\"x\", null]");
    if (spec.size() > gl.shape.size())
      fail(go.at("spec"), "spec has " + std::to_string(spec.size()) + " entries for a global shape of rank " + std::to_string(gl.shape.size()));
    gl.spec.resize(gl.shape.size());
    spec.each_element([&](size_t i, Value e) {
      std::vector<std::string>& axes = gl.spec[i];
      std::string ep = child(go.at("spec"), i);
      if (e.is_string()) axes.emplace_back(e.str());
      else if (e.is_array()) {
        e.each_element([&](size_t k, Value a) {
          if (!a.is_string()) fail(child(ep, k), "expected an axis name");
          axes.emplace_back(a.str());
        });
      } else if (!e.is_null()) fail(ep, "expected an axis name, a list of axis names or null");
    });
    go.done();
    b.global = std::move(gl);
  }
  o.done();
  return b;
}

StreamId parse_stream(Value j, const std::string& ptr) {
  Obj o(j, ptr);
  StreamId s;
  std::string kind = o.str_or("kind", "computation");
  if (kind == "computation") s.kind = StreamId::Kind::computation;
  else if (kind == "communication") s.kind = StreamId::Kind::communication;
  else fail(o.at("kind"), "unknown stream kind '" + kind + "' (expected computation or communication)");
  if (auto id = o.get("id")) {
    int64_t v = as_int(*id, o.at("id"));
    if (v < 0 || v > 1023) fail(o.at("id"), "stream id must be in 0..1023");
    s.id = static_cast<int>(v);
  }
  o.done();
  return s;
}

Cost parse_cost(Value j, const std::string& ptr) {
  Obj o(j, ptr);
  Cost c;
  auto nonneg = [&](std::string_view k) -> std::optional<double> {
    std::optional<Value> v = o.get(k);
    if (!v) return std::nullopt;
    return non_negative(*v, o.at(k));
  };
  c.seconds = nonneg("seconds");
  c.flops = nonneg("flops");
  c.bytes = nonneg("bytes");
  if (!c.seconds && !c.flops && !c.bytes) fail(ptr, "cost needs 'seconds' or 'flops'/'bytes'");
  o.done();
  return c;
}

// The pointer of `key` in `o` is built only for an error message.
std::vector<std::string> parse_axis(Obj& o, std::string_view key) {
  const Value j = o.need(key);
  std::vector<std::string> axes;
  if (j.is_string()) axes.emplace_back(j.str());
  else if (j.is_array() && !j.empty()) {
    j.each_element([&](size_t i, Value e) {
      if (!e.is_string()) fail(child(o.at(key), i), "expected an axis name");
      axes.emplace_back(e.str());
    });
  } else {
    fail(o.at(key), "expected an axis name or a non-empty list of axis names");
  }
  return axes;
}

Block parse_block(Value j, const std::string& ptr, int depth);

}  // namespace

const std::string& OpReader::ptr() const { return o_.ptr(); }
std::string OpReader::at(std::string_view key) const { return o_.at(key); }
void OpReader::fail(std::string_view key, const std::string& message) const { json_reader::fail(key.empty() ? o_.ptr() : o_.at(key), message); }
void OpReader::fail(std::string_view key, size_t index, const std::string& message) const { json_reader::fail(child(o_.at(key), index), message); }
Ref OpReader::ref(std::string_view key) { return ref_of(o_.need(key), o_.ptr(), key); }
std::vector<Ref> OpReader::refs(std::string_view key, bool required) {
  std::vector<Ref> v;
  std::optional<Value> l = required ? o_.need(key) : o_.get(key);
  if (!l) return v;
  if (!l->is_array()) fail(key, "expected a list of refs");
  v.reserve(l->size());
  l->each_element([&](size_t i, Value e) { v.push_back(ref_of(e, o_.ptr(), key, i)); });
  return v;
}
std::vector<std::pair<std::string, Ref>> OpReader::named_refs(std::string_view key) {
  std::vector<std::pair<std::string, Ref>> v;
  if (std::optional<Value> m = o_.get(key)) {
    Obj mo(*m, o_.at(key));
    mo.each([&](std::string_view name, Value r) { v.emplace_back(std::string(name), ref_of(r, mo.ptr(), name)); });
  }
  return v;
}
std::string OpReader::str(std::string_view key) { return o_.str(key); }
uint32_t OpReader::bits(std::string_view key) { return parse_bits(o_.need(key), o_.at(key)); }
ExprPtr OpReader::expr(std::string_view key, std::string& text) {
  text = o_.str(key);
  try {
    return t_cache->exprs.get(text, [&] { return parse_expr(text); });
  } catch (const ThunkyError& e) {
    fail(key, e.what());
  }
}
void OpReader::nested(std::string_view key, const std::function<void(OpReader&)>& read) {
  std::optional<Value> v = o_.get(key);
  if (!v) return;
  Obj inner(*v, o_.at(key));
  OpReader r(inner, depth_);
  read(r);
  inner.done();
}
std::string OpReader::str_or(std::string_view key, std::string fallback) { return o_.str_or(key, std::move(fallback)); }
bool OpReader::has(std::string_view key) const { return o_.has(key); }
std::optional<int64_t> OpReader::int_or_none(std::string_view key) {
  std::optional<Value> v = o_.get(key);
  if (!v) return std::nullopt;
  return as_int(*v, o_.at(key));
}
std::vector<int64_t> OpReader::ints(std::string_view key) { return int_list(o_.need(key), o_.at(key)); }
std::optional<std::vector<std::vector<int64_t>>> OpReader::int_lists(std::string_view key, const char* expected) {
  std::optional<Value> l = o_.get(key);
  if (!l) return std::nullopt;
  if (!l->is_array()) fail(key, expected);
  std::vector<std::vector<int64_t>> v;
  l->each_element([&](size_t i, Value e) { v.push_back(int_list(e, child(o_.at(key), i))); });
  return v;
}
std::vector<std::string> OpReader::names(std::string_view key) { return parse_axis(o_, key); }
Reduction OpReader::reduction(std::string_view key, bool required, const char* expected) {
  const std::string name = required ? o_.str(key) : o_.str_or(key, "sum");
  const std::optional<Reduction> r = parse_reduction(name);
  if (!r) fail(key, "unknown reduction '" + name + "' (expected " + expected + ")");
  return *r;
}
StreamId OpReader::stream(std::string_view key) { return parse_stream(o_.need(key), o_.at(key)); }
Block OpReader::block(std::string_view key, bool required) {
  if (!required && !o_.has(key)) return {};
  return parse_block(o_.need(key), o_.at(key), depth_ + 1);
}
std::vector<Block> OpReader::blocks(std::string_view key) {
  Value br = o_.need(key);
  if (!br.is_array() || br.empty()) fail(key, "expected a non-empty list of command lists");
  std::vector<Block> v;
  br.each_element([&](size_t i, Value e) { v.push_back(parse_block(e, child(o_.at(key), i), depth_ + 1)); });
  return v;
}
namespace {
// The simulator's hint "sim": {key: ...}, read by `read` where present;
// the object's other keys are refused.
template <typename T, typename Read>
std::optional<T> sim_hint(Obj& o, std::string_view key, Read read) {
  std::optional<Value> s = o.get("sim");
  if (!s) return std::nullopt;
  Obj so(*s, o.at("sim"));
  std::optional<T> v;
  if (std::optional<Value> x = so.get(key)) v = read(*x, so.at(key));
  so.done();
  return v;
}
}  // namespace
std::optional<int64_t> OpReader::sim_count(std::string_view key) {
  return sim_hint<int64_t>(o_, key, [](Value v, const std::string& ptr) {
    const int64_t n = as_int(v, ptr);
    if (n < 0) json_reader::fail(ptr, "expected a non-negative integer");
    return n;
  });
}
std::optional<bool> OpReader::sim_flag(std::string_view key) {
  return sim_hint<bool>(o_, key, [](Value v, const std::string& ptr) {
    if (!v.is_boolean()) json_reader::fail(ptr, "expected true or false");
    return v.boolean();
  });
}

namespace {

// Reads the op named `name` into `c` by its description in OpSpec
// (core/ops/): false where no op has that name.
template <size_t I = 0>
bool parse_typed(std::string_view name, OpReader& r, Command& c) {
  if constexpr (I < std::variant_size_v<OpSpec>) {
    using T = std::variant_alternative_t<I, OpSpec>;
    if (name == T::json_name) {
      c.set(T::read(r));
      return true;
    }
    return parse_typed<I + 1>(name, r, c);
  } else {
    return false;
  }
}

// Fills `c`, a fresh command already in its block (no copy of it is made).
void parse_command(Command& c, Value j, std::string where, int depth) {
  c.pointer = std::move(where);
  const std::string& ptr = c.pointer;
  if (depth > 64) fail(ptr, "commands nested more than 64 levels deep");
  Obj o(j, ptr);
  const std::string_view op = o.str_ref("op");
  c.name = o.str_or("name", "");
  if (auto cost = o.get("cost")) c.cost = parse_cost(*cost, o.at("cost"));
  OpReader reader(o, depth);
  if (!parse_typed(op, reader, c)) fail(o.at("op"), "unknown op '" + std::string(op) + "'");
  if (!o.has("sim")) o.get("sim");
  o.done();
}

Block parse_block(Value j, const std::string& ptr, int depth) {
  if (!j.is_array()) fail(ptr, "expected a list of commands, got " + type_name(j));
  // Counted before the block is made: a file of millions of tiny commands
  // is refused before it takes gigabytes.
  t_cache->commands += static_cast<int64_t>(j.size());
  if (t_cache->commands > kMaxLoweredCommands)
    fail(ptr, "the file holds more than " + std::to_string(kMaxLoweredCommands) + " commands, the most thunky takes");
  Block b;
  b.reserve(j.size());
  j.each_element([&](size_t i, Value e) { parse_command(b.emplace_back(), e, child(ptr, i), depth); });
  return b;
}

}  // namespace

std::string_view role_name(Role r) {
  switch (r) {
    case Role::input: return "input";
    case Role::inout: return "inout";
    case Role::output: return "output";
    case Role::scratch: return "scratch";
  }
  return "";
}

std::string_view op_name(Op op) {
  // Each op's JSON name, from its description, in the order of Op.
  static constexpr auto names = []<size_t... I>(std::index_sequence<I...>) {
    return std::array<std::string_view, sizeof...(I)>{std::variant_alternative_t<I, OpSpec>::json_name...};
  }(std::make_index_sequence<std::variant_size_v<OpSpec>>());
  return names[static_cast<size_t>(op)];
}

std::optional<Op> op_named(std::string_view name) {
  for (size_t i = 0; i < std::variant_size_v<OpSpec>; ++i)
    if (op_name(static_cast<Op>(i)) == name) return static_cast<Op>(i);
  return std::nullopt;
}

std::string_view reduction_name(Reduction r) {
  switch (r) {
    case Reduction::sum: return "sum";
    case Reduction::prod: return "prod";
    case Reduction::min: return "min";
    case Reduction::max: return "max";
    case Reduction::mean: return "mean";
  }
  return "";
}

std::optional<Reduction> parse_reduction(std::string_view name) {
  for (Reduction r : {Reduction::sum, Reduction::prod, Reduction::min, Reduction::max, Reduction::mean})
    if (reduction_name(r) == name) return r;
  return std::nullopt;
}

double reduction_identity(Reduction r) {
  switch (r) {
    case Reduction::sum:
    case Reduction::mean: return 0.0;
    case Reduction::prod: return 1.0;
    case Reduction::min: return INFINITY;
    case Reduction::max: return -INFINITY;
  }
  return 0.0;
}

double reduce_values(Reduction r, double a, double b) {
  switch (r) {
    case Reduction::sum:
    case Reduction::mean: return a + b;
    case Reduction::prod: return a * b;
    case Reduction::min: return std::fmin(a, b);
    case Reduction::max: return std::fmax(a, b);
  }
  return a;
}

bool arg_beats(Reduction r, double v, double best) {
  if (std::isnan(best)) return false;
  if (std::isnan(v)) return true;
  switch (r) {
    case Reduction::max: return v > best;
    case Reduction::min: return v < best;
    case Reduction::sum:
    case Reduction::prod:
    case Reduction::mean: return false;
  }
  return false;
}

double reduction_finish(Reduction r, double acc, int64_t n) { return r == Reduction::mean ? acc / static_cast<double>(n) : acc; }

bool reduction_takes_integers(Reduction r) { return r != Reduction::mean; }

namespace {
Program read_program(Value doc, const std::string& file) {
  Program p;
  ParseCache cache;
  cache.texts = p.texts.get();
  ParseCache* const outer = t_cache;  // none, unless a parse is nested
  t_cache = &cache;
  struct Restore {
    ParseCache* outer;
    ~Restore() { t_cache = outer; }
  } restore{outer};
  Obj o(doc, "");
  p.file = file;
  std::string fmt = o.str("format");
  if (fmt != "thunky.sched/1") fail("/format", "unsupported format '" + fmt + "' (expected \"thunky.sched/1\")");
  p.name = o.str_or("name", "");
  p.description = o.str_or("description", "");
  p.machine = o.str_or("machine", "");
  if (std::optional<Value> m = o.get("mesh")) {
    Obj mo(*m, "/mesh");
    Value names = mo.need("axis_names");
    if (!names.is_array()) fail("/mesh/axis_names", "expected a list of axis names");
    names.each_element([&](size_t i, Value e) {
      if (!e.is_string() || e.str().empty()) fail(child("/mesh/axis_names", i), "expected an axis name");
      std::string n(e.str());
      for (const auto& prev : p.mesh.axis_names)
        if (prev == n) fail(child("/mesh/axis_names", i), "duplicate axis name '" + n + "'");
      p.mesh.axis_names.push_back(n);
    });
    p.mesh.shape = int_list(mo.need("shape"), "/mesh/shape");
    if (p.mesh.shape.size() != p.mesh.axis_names.size())
      fail("/mesh/shape", "mesh shape has " + std::to_string(p.mesh.shape.size()) + " entries for " + std::to_string(p.mesh.axis_names.size()) + " axis names");
    int64_t total = 1;
    for (size_t i = 0; i < p.mesh.shape.size(); ++i) {
      if (p.mesh.shape[i] < 1) fail(child("/mesh/shape", i), "mesh dimensions must be at least 1");
      total *= p.mesh.shape[i];
      if (total > 65536) fail("/mesh/shape", "meshes of more than 65536 ranks are not supported");
    }
    mo.done();
  }
  Value bufs = o.need("buffers");
  Obj bo(bufs, "/buffers");
  p.buffers.reserve(bufs.size());
  bo.each([&](std::string_view name, Value v, std::string at) { p.buffers.push_back(parse_buffer(std::string(name), v, at)); });
  if (auto fns = o.get("functions")) {
    Obj fo(*fns, "/functions");
    fo.each([&](std::string_view name, Value v, std::string fp) {
      Obj f(v, fp);
      Function fn;
      fn.pointer = fp;
      if (auto params = f.get("params")) {
        if (!params->is_array()) fail(f.at("params"), "expected a list of parameter names");
        params->each_element([&](size_t i, Value e) {
          if (!e.is_string()) fail(child(f.at("params"), i), "expected a parameter name");
          if (std::find(fn.params.begin(), fn.params.end(), e.str()) != fn.params.end())
            fail(child(f.at("params"), i), "parameter '" + std::string(e.str()) + "' is listed twice");
          fn.params.emplace_back(e.str());
        });
      }
      if (auto scratch = f.get("scratch")) {
        Obj so(*scratch, f.at("scratch"));
        so.each([&](std::string_view sname, Value sv, std::string sp) {
          Buffer b = parse_buffer(std::string(sname), sv, sp);
          if (b.role != Role::scratch) fail(sp, "function scratch buffers have role scratch");
          fn.scratch.emplace_back(std::string(sname), std::move(b));
        });
      }
      fn.program = parse_block(f.need("program"), f.at("program"), 1);
      f.done();
      p.functions.emplace(std::string(name), std::move(fn));
    });
  }
  p.program = parse_block(o.need("program"), "/program", 0);
  o.done();
  return p;
}

}  // namespace

Program parse_program_text(const std::string& text, const std::string& file) {
  Document doc(text);
  return read_program(doc.root(), file);
}

Program parse_program(const json& doc, const std::string& file) { return parse_program_text(doc.dump(), file); }

namespace {
json init_json(const Init& in) {
  static const char* kinds[] = {"", "zeros", "ones", "iota", "constant", "values", "uniform", "normal", "axis_index", "npy"};
  json j;
  j["kind"] = kinds[static_cast<int>(in.kind)];
  switch (in.kind) {
    case Init::Kind::constant: j["value"] = in.value; break;
    case Init::Kind::values: j["values"] = in.values; break;
    case Init::Kind::uniform: j["low"] = in.low; j["high"] = in.high; j["seed"] = in.seed; break;
    case Init::Kind::normal: j["seed"] = in.seed; break;
    case Init::Kind::axis_index: j["axis"] = in.axis; break;
    case Init::Kind::npy:
      j["path"] = in.path;
      if (in.bits) j["dtype"] = std::string(dtype_name(*in.bits));
      break;
    default: break;
  }
  return j;
}
json buffer_json(const Buffer& b) {
  json j;
  j["shape"] = b.shape;
  j["dtype"] = dtype_name(b.dtype);
  j["role"] = role_name(b.role);
  if (b.init.kind != Init::Kind::none) j["init"] = init_json(b.init);
  if (b.global) {
    json spec = json::array();
    for (const auto& axes : b.global->spec) {
      if (axes.empty()) spec.push_back(nullptr);
      else if (axes.size() == 1) spec.push_back(axes[0]);
      else spec.push_back(axes);
    }
    j["global"] = {{"shape", b.global->shape}, {"spec", spec}};
  }
  return j;
}
}  // namespace

json ref_json(const Ref& r) { return r.syntax->text(); }
json refs_json(const std::vector<Ref>& v) {
  json a = json::array();
  for (const auto& r : v) a.push_back(r.syntax->text());
  return a;
}
json block_json(const Block& b) {
  json a = json::array();
  for (const auto& c : b) a.push_back(to_json(c));
  return a;
}
json named_refs_json(const std::vector<std::pair<std::string, Ref>>& refs) {
  json m = json::object();
  for (const auto& [k, r] : refs) m[k] = r.syntax->text();
  return m;
}
json stream_json(const StreamId& s) {
  return {{"kind", s.kind == StreamId::Kind::computation ? "computation" : "communication"}, {"id", s.id}};
}

json to_json(const Command& c) {
  json j;
  j["op"] = op_name(c.op());
  if (!c.name.empty()) j["name"] = c.name;
  if (c.cost) {
    json cj = json::object();
    if (c.cost->seconds) cj["seconds"] = *c.cost->seconds;
    if (c.cost->flops) cj["flops"] = *c.cost->flops;
    if (c.cost->bytes) cj["bytes"] = *c.cost->bytes;
    j["cost"] = cj;
  }
  std::visit([&](const auto& x) { x.write(j); }, c.spec);
  return j;
}

json to_json(const Program& p) {
  json j;
  j["format"] = "thunky.sched/1";
  if (!p.name.empty()) j["name"] = p.name;
  if (!p.description.empty()) j["description"] = p.description;
  if (!p.machine.empty()) j["machine"] = p.machine;
  if (!p.mesh.axis_names.empty()) j["mesh"] = {{"axis_names", p.mesh.axis_names}, {"shape", p.mesh.shape}};
  json bufs = json::object();
  for (const auto& b : p.buffers) bufs[b.name] = buffer_json(b);
  j["buffers"] = bufs;
  if (!p.functions.empty()) {
    json fns = json::object();
    for (const auto& [name, f] : p.functions) {
      json fj;
      fj["params"] = f.params;
      json scratch = json::object();
      for (const auto& [sn, sb] : f.scratch) scratch[sn] = buffer_json(sb);
      fj["scratch"] = scratch;
      fj["program"] = block_json(f.program);
      fns[name] = fj;
    }
    j["functions"] = fns;
  }
  j["program"] = block_json(p.program);
  return j;
}

}  // namespace thunky
