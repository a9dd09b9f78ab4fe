#include "tools/gen.h"

#include <algorithm>
#include <stdexcept>

namespace thunky::gen {

using ojson = nlohmann::ordered_json;

namespace {

ojson input(ojson shape, const std::string& dtype, int seed) {
  return {{"shape", std::move(shape)}, {"dtype", dtype}, {"role", "input"},
          {"init", {{"kind", "uniform"}, {"low", -1.0}, {"high", 1.0}, {"seed", seed}}}};
}

ojson sharded(ojson buffer, ojson global_shape, ojson spec) {
  buffer["global"] = {{"shape", std::move(global_shape)}, {"spec", std::move(spec)}};
  return buffer;
}

// A schedule's header on mesh axis x of o.ranks ranks, the sizes checked.
ojson header(const RingMatmulOptions& o, const std::string& name) {
  if (o.ranks < 1 || o.m_block < 1 || o.k < 1 || o.n_block < 1) throw std::invalid_argument("ranks and block sizes must be positive");
  ojson s;
  s["format"] = "thunky.sched/1";
  s["name"] = name;
  s["mesh"] = {{"axis_names", {"x"}}, {"shape", {o.ranks}}};
  return s;
}

// The all-gather variants' buffers: A[M_x, K] . B[K, N_x] -> C[M, N_x].
ojson common(const RingMatmulOptions& o, const std::string& name) {
  const int64_t n = o.ranks;
  ojson s = header(o, name);
  ojson& b = s["buffers"];
  b["a"] = sharded(input({o.m_block, o.k}, o.dtype, 1), {n * o.m_block, o.k}, {"x", nullptr});
  b["b"] = sharded(input({o.k, o.n_block}, o.dtype, 2), {o.k, n * o.n_block}, {nullptr, "x"});
  b["c"] = sharded({{"shape", {n * o.m_block, o.n_block}}, {"dtype", o.dtype}, {"role", "output"}}, {n * o.m_block, n * o.n_block}, {nullptr, "x"});
  return s;
}

// The reduce-scatter variants' buffers: A[M, K_x] . B[K_x, N] -> C[M_x, N].
ojson reduce_scatter_common(const RingMatmulOptions& o, const std::string& name) {
  const int64_t n = o.ranks;
  ojson s = header(o, name);
  ojson& b = s["buffers"];
  b["a"] = sharded(input({n * o.m_block, o.k}, o.dtype, 1), {n * o.m_block, n * o.k}, {nullptr, "x"});
  b["b"] = sharded(input({o.k, o.n_block}, o.dtype, 2), {n * o.k, o.n_block}, {"x", nullptr});
  b["c"] = sharded({{"shape", {o.m_block, o.n_block}}, {"dtype", o.dtype}, {"role", "output"}}, {n * o.m_block, o.n_block}, {"x", nullptr});
  return s;
}

ojson scratch(int64_t rows, int64_t cols, const std::string& dtype) {
  return {{"shape", {rows, cols}}, {"dtype", dtype}, {"role", "scratch"}};
}

// Row block of C that step s fills: ((x - s) mod N) * m_block (or x + s).
std::string c_rows(const RingMatmulOptions& o, int64_t step, bool ccw) {
  std::string idx = "(x " + std::string(ccw ? "+ " : "- ") + std::to_string(step) + ") % " + std::to_string(o.ranks);
  return "c[ds((" + idx + ") * " + std::to_string(o.m_block) + ", " + std::to_string(o.m_block) + ")]";
}

ojson shift(const std::string& src, const std::string& dst, int64_t k, const std::string& name) {
  return {{"op", "collective_permute"}, {"name", name}, {"src", src}, {"dst", dst}, {"axis", "x"}, {"shift", k}};
}

ojson async(const std::string& token, ojson body) {
  return {{"op", "async_start"}, {"token", token}, {"stream", {{"kind", "communication"}, {"id", 0}}}, {"body", std::move(body)}};
}

ojson done(const std::string& token) { return {{"op", "async_done"}, {"token", token}}; }

ojson gemm(const std::string& a, const std::string& c, const std::string& name) {
  return {{"op", "gemm"}, {"name", name}, {"a", a}, {"b", "b"}, {"c", c}};
}

// out = part + recv: a step of a reduce-scatter ring adds the partial sum it received.
ojson add_received(const std::string& name, const std::string& out, const std::string& part, const std::string& recv) {
  return {{"op", "map"}, {"name", name}, {"out", out}, {"expr", "p + r"}, {"in", {{"p", part}, {"r", recv}}}};
}

// One device, no mesh: C = A x B of the given shapes.
ojson one_device_matmul(const RingMatmulOptions& o, const std::string& name, int64_t m, int64_t k, int64_t n, const std::string& description) {
  if (o.ranks < 1 || o.m_block < 1 || o.k < 1 || o.n_block < 1) throw std::invalid_argument("ranks and block sizes must be positive");
  ojson s;
  s["format"] = "thunky.sched/1";
  s["name"] = name;
  s["description"] = description;
  s["buffers"]["a"] = input({m, k}, o.dtype, 1);
  s["buffers"]["b"] = input({k, n}, o.dtype, 2);
  s["buffers"]["c"] = {{"shape", {m, n}}, {"dtype", o.dtype}, {"role", "output"}};
  s["program"] = {gemm("a", "c", "GEMM")};
  return s;
}

}  // namespace

ojson ring_matmul(const RingMatmulOptions& o) {
  const int64_t n = o.ranks;
  ojson s = common(o, "ring_collective_matmul_n" + std::to_string(n));
  s["description"] = "Unidirectional ring collective matmul: C = AllGather(A) x B, shifting A chunks clockwise on communication:0 while computation:0 multiplies the chunk it holds.";
  const int64_t bufs = std::min<int64_t>(2, n - 1);
  for (int64_t i = 0; i < bufs; ++i) s["buffers"]["ring" + std::to_string(i)] = scratch(o.m_block, o.k, o.dtype);
  auto ring = [&](int64_t i) { return "ring" + std::to_string(i % bufs); };
  ojson prog = ojson::array();
  auto launch = [&](int64_t step) {
    std::string src = step == 1 ? "a" : ring(step - 2);
    prog.push_back(async("shift" + std::to_string(step), ojson::array({shift(src, ring(step - 1), 1, "shift " + std::to_string(step))})));
  };
  for (int64_t st = 1; st < std::min<int64_t>(3, n); ++st) launch(st);
  prog.push_back(gemm("a", c_rows(o, 0, false), "GEMM 0"));
  for (int64_t st = 1; st < n; ++st) {
    prog.push_back(done("shift" + std::to_string(st)));
    prog.push_back(gemm(ring(st - 1), c_rows(o, st, false), "GEMM " + std::to_string(st)));
    if (st + 2 < n) launch(st + 2);
  }
  s["program"] = prog;
  return s;
}

ojson bidirectional_ring_matmul(const RingMatmulOptions& o) {
  const int64_t n = o.ranks;
  const int64_t pairs = (n - 1) / 2;
  const bool has_mid = n % 2 == 0;
  const int64_t steps = pairs + (has_mid ? 1 : 0);
  ojson s = common(o, std::string("bidirectional_ring_collective_matmul_n") + std::to_string(n) + (o.literal ? "_literal" : ""));
  s["description"] = o.literal
      ? "Bidirectional ring collective matmul with its original workspace sizing. At N = 4 its workspace of min(2, num_pairs) = 1 pair buffer is too small: the middle shift overwrites pair0 while GEMM 1 still reads it (a real race, reported by validation)."
      : "Bidirectional ring collective matmul: grouped clockwise and counter-clockwise shifts on communication:0, one fused GEMM per pair. The workspace has min(2, total steps) pair buffers so that the middle step of even N never overwrites a buffer a GEMM still reads.";
  int64_t bufs;
  if (pairs > 0) bufs = o.literal ? std::min<int64_t>(2, pairs) : std::min<int64_t>(2, steps);
  else bufs = 1;
  const int64_t rows = pairs > 0 ? 2 * o.m_block : o.m_block;
  for (int64_t i = 0; i < bufs; ++i) s["buffers"]["pair" + std::to_string(i)] = scratch(rows, o.k, o.dtype);
  const std::string mb = std::to_string(o.m_block);
  auto pair = [&](int64_t i) { return "pair" + std::to_string(((i % bufs) + bufs) % bufs); };
  // One fused GEMM of the (2 m_block, k) pair buffer, scattered to two row blocks.
  s["functions"]["pair_matmul_scatter"] = {
      {"params", {"lhs", "out_cw", "out_ccw"}},
      {"scratch", {{"c_pair", scratch(2 * o.m_block, o.n_block, o.dtype)}}},
      {"program",
       {{{"op", "gemm"}, {"name", "pair GEMM"}, {"a", "lhs"}, {"b", "b"}, {"c", "c_pair"}},
        {{"op", "copy"}, {"src", "c_pair[:" + mb + "]"}, {"dst", "out_cw"}},
        {{"op", "copy"}, {"src", "c_pair[" + mb + ":]"}, {"dst", "out_ccw"}}}}};
  ojson prog = ojson::array();
  auto launch = [&](int64_t step) {
    std::string tok = "step" + std::to_string(step);
    if (step <= pairs) {
      std::string scw = step == 1 ? "a" : pair(step - 2) + "[:" + mb + "]";
      std::string sccw = step == 1 ? "a" : pair(step - 2) + "[" + mb + ":]";
      ojson group = {{"op", "collective_group"}, {"name", "pair step " + std::to_string(step)},
                     {"body", {shift(scw, pair(step - 1) + "[:" + mb + "]", 1, "cw " + std::to_string(step)),
                               shift(sccw, pair(step - 1) + "[" + mb + ":]", -1, "ccw " + std::to_string(step))}}};
      prog.push_back(async(tok, ojson::array({group})));
    } else {
      std::string src = pairs > 0 ? pair(pairs - 1) + "[:" + mb + "]" : "a";
      std::string dst = pairs > 0 ? pair(step - 1) + "[:" + mb + "]" : "pair0";
      prog.push_back(async(tok, ojson::array({shift(src, dst, 1, "mid " + std::to_string(step))})));
    }
  };
  for (int64_t st = 1; st < std::min<int64_t>(3, steps + 1); ++st) launch(st);
  prog.push_back(gemm("a", c_rows(o, 0, false), "GEMM 0"));
  for (int64_t st = 1; st <= steps; ++st) {
    prog.push_back(done("step" + std::to_string(st)));
    if (st <= pairs) {
      prog.push_back({{"op", "call"}, {"name", "GEMM " + std::to_string(st)}, {"fn", "pair_matmul_scatter"},
                      {"args", {{"lhs", pair(st - 1)}, {"out_cw", c_rows(o, st, false)}, {"out_ccw", c_rows(o, st, true)}}}});
    } else {
      std::string mid = pairs > 0 ? pair(st - 1) + "[:" + mb + "]" : "pair0";
      prog.push_back(gemm(mid, c_rows(o, st, false), "GEMM " + std::to_string(st)));
    }
    if (st + 2 <= steps) launch(st + 2);
  }
  s["program"] = prog;
  return s;
}

ojson blocking_matmul(const RingMatmulOptions& o) {
  ojson s = common(o, "blocking_matmul_n" + std::to_string(o.ranks));
  s["description"] = "Blocking baseline: AllGather A, then one GEMM; nothing overlaps.";
  s["buffers"]["a_full"] = scratch(o.ranks * o.m_block, o.k, o.dtype);
  s["program"] = {{{"op", "all_gather"}, {"name", "all_gather A"}, {"src", "a"}, {"dst", "a_full"}, {"axis", "x"}},
                  {{"op", "gemm"}, {"name", "GEMM"}, {"a", "a_full"}, {"b", "b"}, {"c", "c"}}};
  return s;
}

ojson unsharded_matmul(const RingMatmulOptions& o) {
  return one_device_matmul(o, "unsharded_matmul_n" + std::to_string(o.ranks), o.ranks * o.m_block, o.k, o.n_block,
                           "Unsharded baseline: one device's GEMM of the AllGather matmuls (the gathered A times its B block) with no communication; its makespan is the floor that overlapping aims at.");
}

ojson ring_reduce_scatter_matmul(const RingMatmulOptions& o) {
  const int64_t n = o.ranks;
  ojson s = reduce_scatter_common(o, "ring_reduce_scatter_matmul_n" + std::to_string(n));
  s["description"] = "Ring collective matmul whose output is reduce-scattered: C = ReduceScatter(A x B). At step s rank x multiplies row block (x + s + 1) mod N of A by its B, adds the partial sum received from rank x + 1 and passes it to rank x - 1 on communication:0 while the next block's GEMM runs; after N - 1 steps each rank holds its own block, fully reduced.";
  const std::string mb = std::to_string(o.m_block);
  auto rows = [&](int64_t step) { return "a[ds(((x + " + std::to_string(step + 1) + ") % " + std::to_string(n) + ") * " + mb + ", " + mb + ")]"; };
  ojson prog = ojson::array();
  if (n == 1) {
    prog.push_back(gemm("a", "c", "GEMM 0"));
    s["program"] = prog;
    return s;
  }
  for (const char* name : {"acc", "part", "recv"}) s["buffers"][name] = scratch(o.m_block, o.n_block, o.dtype);
  prog.push_back(gemm(rows(0), "acc", "GEMM 0"));
  for (int64_t st = 1; st < n; ++st) {
    const std::string tok = "pass" + std::to_string(st);
    prog.push_back(async(tok, ojson::array({shift("acc", "recv", -1, "pass " + std::to_string(st))})));
    prog.push_back(gemm(rows(st), "part", "GEMM " + std::to_string(st)));
    prog.push_back(done(tok));
    prog.push_back(add_received("accumulate " + std::to_string(st), st + 1 == n ? "c" : "acc", "part", "recv"));
  }
  s["program"] = prog;
  return s;
}

ojson bidirectional_ring_reduce_scatter_matmul(const RingMatmulOptions& o) {
  const int64_t n = o.ranks;
  ojson s = reduce_scatter_common(o, "bidirectional_ring_reduce_scatter_matmul_n" + std::to_string(n));
  s["description"] = "Bidirectional ring collective matmul whose output is reduce-scattered: each row block of C is split in two halves whose partial sums travel opposite ways, the top half to rank x - 1 and the bottom half to rank x + 1, as one grouped pair of shifts on communication:0 per step, while the next step's two half-block GEMMs run; every step moves half the bytes of the unidirectional ring over twice the links.";
  ojson prog = ojson::array();
  if (n == 1) {
    prog.push_back(gemm("a", "c", "GEMM 0"));
    s["program"] = prog;
    return s;
  }
  if (o.m_block < 2) throw std::invalid_argument("the bidirectional reduce-scatter ring splits each row block in two: --m-block must be at least 2");
  const int64_t top = o.m_block / 2, bottom = o.m_block - top;
  const std::string mb = std::to_string(o.m_block), ns = std::to_string(n);
  // Rows of A for the top half of block (x + step + 1) mod N and the bottom half of block (x - step - 1) mod N.
  auto top_rows = [&](int64_t step) {
    return "a[ds(((x + " + std::to_string(step + 1) + ") % " + ns + ") * " + mb + ", " + std::to_string(top) + ")]";
  };
  auto bottom_rows = [&](int64_t step) {
    return "a[ds(((x - " + std::to_string(step + 1) + ") % " + ns + ") * " + mb + " + " + std::to_string(top) + ", " + std::to_string(bottom) + ")]";
  };
  for (const char* name : {"acc_cw", "part_cw", "recv_cw"}) s["buffers"][name] = scratch(top, o.n_block, o.dtype);
  for (const char* name : {"acc_ccw", "part_ccw", "recv_ccw"}) s["buffers"][name] = scratch(bottom, o.n_block, o.dtype);
  prog.push_back(gemm(top_rows(0), "acc_cw", "GEMM 0 top"));
  prog.push_back(gemm(bottom_rows(0), "acc_ccw", "GEMM 0 bottom"));
  for (int64_t st = 1; st < n; ++st) {
    const std::string tok = "pass" + std::to_string(st), k = std::to_string(st);
    ojson group = {{"op", "collective_group"}, {"name", "pass " + k},
                   {"body", {shift("acc_cw", "recv_cw", -1, "cw " + k), shift("acc_ccw", "recv_ccw", 1, "ccw " + k)}}};
    prog.push_back(async(tok, ojson::array({group})));
    prog.push_back(gemm(top_rows(st), "part_cw", "GEMM " + k + " top"));
    prog.push_back(gemm(bottom_rows(st), "part_ccw", "GEMM " + k + " bottom"));
    prog.push_back(done(tok));
    const bool last = st + 1 == n;
    prog.push_back(add_received("accumulate " + k + " top", last ? "c[:" + std::to_string(top) + "]" : "acc_cw", "part_cw", "recv_cw"));
    prog.push_back(add_received("accumulate " + k + " bottom", last ? "c[" + std::to_string(top) + ":]" : "acc_ccw", "part_ccw", "recv_ccw"));
  }
  s["program"] = prog;
  return s;
}

ojson blocking_reduce_scatter_matmul(const RingMatmulOptions& o) {
  ojson s = reduce_scatter_common(o, "blocking_reduce_scatter_matmul_n" + std::to_string(o.ranks));
  s["description"] = "Blocking baseline: one GEMM of the local partial product, then ReduceScatter; nothing overlaps.";
  s["buffers"]["c_partial"] = scratch(o.ranks * o.m_block, o.n_block, o.dtype);
  s["program"] = {gemm("a", "c_partial", "GEMM"),
                  {{"op", "reduce_scatter"}, {"name", "reduce_scatter C"}, {"src", "c_partial"}, {"dst", "c"}, {"axis", "x"}}};
  return s;
}

ojson unsharded_reduce_scatter_matmul(const RingMatmulOptions& o) {
  return one_device_matmul(o, "unsharded_reduce_scatter_matmul_n" + std::to_string(o.ranks), o.ranks * o.m_block, o.k, o.n_block,
                           "Unsharded baseline: one device's partial product of the ReduceScatter matmuls (its K columns of A times its K rows of B) with no communication; its makespan is the floor that overlapping aims at.");
}

}  // namespace thunky::gen
