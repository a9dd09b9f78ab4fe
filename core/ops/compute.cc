#include "core/ops/compute.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/json_reader.h"
#include "core/ops/op_io.h"
#include "core/schedule.h"

namespace thunky {

using json_reader::Value;

Memzero Memzero::read(OpReader& r) {
  Memzero m;
  m.dst = r.ref("dst");
  return m;
}
void Memzero::write(json& j) const { j["dst"] = ref_json(dst); }

Memset Memset::read(OpReader& r) {
  Memset m;
  m.dst = r.ref("dst");
  if (r.has("bits") == r.has("value")) r.fail("", "memset takes one of \"value\" (a number) and \"bits\" (a 32-bit pattern)");
  if (r.has("bits")) {
    m.bits = r.bits("bits");
    return m;
  }
  Value v = r.obj().need("value");
  if (v.is_string()) {
    // The values JSON cannot write as numbers.
    const std::string_view t = v.str();
    if (t == "nan") m.value = std::numeric_limits<double>::quiet_NaN();
    else if (t == "inf") m.value = std::numeric_limits<double>::infinity();
    else if (t == "-inf") m.value = -std::numeric_limits<double>::infinity();
    else r.fail("value", "expected a number, true, false, \"nan\", \"inf\" or \"-inf\", got \"" + std::string(t) + "\"");
  } else {
    if (!v.is_number() && !v.is_boolean()) r.fail("value", "expected a number");
    m.value = v.is_boolean() ? (v.boolean() ? 1 : 0) : json_reader::finite_number(v, r.at("value"));
  }
  return m;
}
void Memset::write(json& j) const {
  j["dst"] = ref_json(dst);
  if (bits) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(*bits));
    j["bits"] = hex;
  } else if (std::isfinite(value)) {
    j["value"] = value;
  } else {
    j["value"] = std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
  }
}

Copy Copy::read(OpReader& r) {
  Copy c;
  c.src = r.ref("src");
  c.dst = r.ref("dst");
  return c;
}
void Copy::write(json& j) const {
  j["src"] = ref_json(src);
  j["dst"] = ref_json(dst);
}

Transpose Transpose::read(OpReader& r) {
  Transpose t;
  t.src = r.ref("src");
  t.dst = r.ref("dst");
  t.perm = r.ints("perm");
  return t;
}
void Transpose::write(json& j) const {
  j["src"] = ref_json(src);
  j["dst"] = ref_json(dst);
  j["perm"] = perm;
}

Gemm Gemm::read(OpReader& r) {
  Gemm g;
  g.a = r.ref("a");
  g.b = r.ref("b");
  g.c = r.ref("c");
  g.transpose_a = r.obj().bool_or("transpose_a", false);
  g.transpose_b = r.obj().bool_or("transpose_b", false);
  g.alpha = r.obj().num_or("alpha", 1.0);
  g.beta = r.obj().num_or("beta", 0.0);
  return g;
}
void Gemm::write(json& j) const {
  j["a"] = ref_json(a);
  j["b"] = ref_json(b);
  j["c"] = ref_json(c);
  j["transpose_a"] = transpose_a;
  j["transpose_b"] = transpose_b;
  j["alpha"] = alpha;
  j["beta"] = beta;
}

Map Map::read(OpReader& r) {
  Map m;
  m.out = r.ref("out");
  m.expr = r.expr("expr", m.expr_text);
  m.in = r.named_refs("in");
  return m;
}
void Map::write(json& j) const {
  j["out"] = ref_json(out);
  j["expr"] = expr_text;
  j["in"] = named_refs_json(in);
}

Reduce Reduce::read(OpReader& r) {
  Reduce x;
  x.out = r.ref("out");
  x.in = r.ref("in");
  // argmax and argmin: the index where max or min is first reached.
  const std::string fn = r.str("fn");
  if (fn == "argmax" || fn == "argmin") {
    x.fn = fn == "argmax" ? Reduction::max : Reduction::min;
    x.arg = true;
  } else {
    x.fn = r.reduction("fn", true, "sum, prod, min, max, mean, argmax or argmin");
  }
  x.axes = r.ints("axes");
  return x;
}
void Reduce::write(json& j) const {
  j["out"] = ref_json(out);
  j["in"] = ref_json(in);
  std::string name = arg ? "arg" : "";
  name += reduction_name(fn);
  j["fn"] = name;
  j["axes"] = axes;
}

Kernel Kernel::read(OpReader& r) {
  Kernel k;
  k.reads = r.refs("reads", false);
  k.writes = r.refs("writes", false);
  if (!r.has("cost")) r.fail("", "a kernel needs a 'cost' ({\"seconds\": s} or {\"flops\": f, \"bytes\": b})");
  return k;
}
void Kernel::write(json& j) const {
  j["reads"] = refs_json(reads);
  j["writes"] = refs_json(writes);
}

PtxKernel PtxKernel::read(OpReader& r) {
  PtxKernel k;
  k.args = r.refs("args", true);
  Value w = r.obj().need("written");
  if (!w.is_array() || w.size() != k.args.size()) r.fail("written", "expected a list of " + std::to_string(k.args.size()) + " booleans, one per arg");
  w.each_element([&](size_t i, Value e) {
    if (!e.is_boolean()) r.fail("written", i, "expected true or false");
    k.written.push_back(e.boolean());
  });
  PtxLaunch& l = *(k.launch = PtxLaunch{});
  l.kernel_name = r.str("kernel_name");
  l.ptx = r.str_or("ptx", "");
  l.ptx_file = r.str_or("ptx_file", "");
  if (l.ptx.empty() == l.ptx_file.empty()) r.fail("", "a ptx_kernel needs exactly one of 'ptx' or 'ptx_file'");
  auto dims = [&](std::string_view key, std::vector<int64_t>& d) {
    if (!r.has(key)) return;
    d = r.ints(key);
    if (d.empty() || d.size() > 3) r.fail(key, "expected 1 to 3 dimensions");
    for (auto x : d)
      if (x < 1) r.fail(key, "dimensions must be positive");
    d.resize(3, 1);
  };
  dims("grid", l.grid);
  dims("block", l.block);
  if (std::optional<int64_t> s = r.int_or_none("shmem_bytes")) l.shmem_bytes = *s;
  r.nested("cpu", [&](OpReader& m) { k.cpu = Map::read(m); });
  return k;
}
void PtxKernel::write(json& j) const {
  j["args"] = refs_json(args);
  j["written"] = written;
  j["kernel_name"] = launch->kernel_name;
  if (!launch->ptx.empty()) j["ptx"] = launch->ptx;
  if (!launch->ptx_file.empty()) j["ptx_file"] = launch->ptx_file;
  j["grid"] = launch->grid;
  j["block"] = launch->block;
  j["shmem_bytes"] = launch->shmem_bytes;
  if (cpu) {
    json m = json::object();
    cpu->write(m);
    j["cpu"] = m;
  }
}

CustomCall CustomCall::read(OpReader& r) {
  CustomCall c;
  CustomCallSpec& spec = *(c.spec = CustomCallSpec{});
  spec.target = r.str("target");
  c.operands = r.refs("operands", true);
  c.results = r.refs("results", true);
  if (std::optional<Value> bc = r.obj().get("backend_config")) {
    if (!bc->is_object()) r.fail("backend_config", "expected an object");
    spec.backend_config = bc->to_nlohmann();
  } else {
    spec.backend_config = json::object();
  }
  return c;
}
void CustomCall::write(json& j) const {
  j["target"] = spec->target;
  j["operands"] = refs_json(operands);
  j["results"] = refs_json(results);
  j["backend_config"] = spec->backend_config;
}

}  // namespace thunky
