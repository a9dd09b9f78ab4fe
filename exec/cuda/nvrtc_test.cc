// NVRTC compiles every kind of generated kernel to PTX for Hopper, on any
// machine with the CUDA toolkit (no GPU needed): every map of the bundled
// examples, loads and stores of every dtype, reductions, the collective
// reduction and the support module with its graph-conditional kernels.
#include "exec/cuda/nvrtc.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/load.h"
#include "core/validate.h"
#include "exec/cuda/check.h"
#include "tests/test_util.h"

namespace thunky::cuda {
namespace {

// The PTX defines the entry point for sm_90.
void expect_compiles(const KernelSource& src, const std::string& entry = "") {
  const std::string ptx = compile_ptx(src, 90);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(ptx.find(".entry " + (entry.empty() ? src.entry : entry)), std::string::npos) << ptx.substr(0, 400);
}

void maps_of(const Program& p, const Block& b, std::vector<const Map*>& out) {
  for (const auto& c : b) {
    if (const Map* m = c.get_if<Map>()) out.push_back(m);
    for_each_sub_block(c, [&](const Block& sub) { maps_of(p, sub, out); });
  }
}

TEST(Nvrtc, EveryMapOfTheExamplesCompiles) {
  int compiled = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_dir() + "/examples")) {
    if (entry.path().extension() != ".json") continue;
    auto p = load_schedule_file(entry.path().string());
    if (!p) continue;  // an example kept for its diagnostic (a race)
    std::vector<const Map*> maps;
    maps_of(*p, p->program, maps);
    const RankCtx ctx = rank_ctx(p->mesh, 0);
    for (const Map* m : maps) {
      std::vector<MapOperand> ops;
      const View out = resolve(*p, m->out, ctx);
      for (const auto& [name, r] : m->in) {
        const View v = resolve(*p, r, ctx);
        ops.push_back({name, v.dtype, v.count() == 1 && out.count() != 1});
      }
      SCOPED_TRACE(entry.path().filename().string() + " " + m->expr_text);
      expect_compiles(map_kernel(*m->expr, ops, p->mesh.axis_names, out.dtype));
      ++compiled;
    }
  }
  // collatz 5, power_of_two_loop 3 and one or more in eight others.
  EXPECT_GE(compiled, 15);
}

TEST(Nvrtc, EveryDtypeLoadsAndStores) {
  const ExprPtr e = parse_expr("f64(x) + 1");
  for (int t = 0; t <= static_cast<int>(DType::boolean); ++t) {
    SCOPED_TRACE(dtype_name(static_cast<DType>(t)));
    expect_compiles(map_kernel(*e, {{"x", static_cast<DType>(t), false}}, {}, static_cast<DType>(t)));
  }
}

TEST(Nvrtc, ReductionsAndSupportKernelsCompile) {
  for (const std::string fn : {"sum", "prod", "max", "min", "mean"}) {
    expect_compiles(reduce_kernel(DType::bf16, DType::f32, *parse_reduction(fn)));
    if (fn == "max" || fn == "min") expect_compiles(reduce_kernel(DType::bf16, DType::s64, *parse_reduction(fn), true));
    expect_compiles(transpose_kernel(2));
    expect_compiles(combine_kernel(DType::f16, *parse_reduction(fn)));
  }
  const KernelSource support = support_kernels();
  for (const char* entry : {"thunky_fill", "thunky_touch", "thunky_spin", "thunky_set_if", "thunky_set_switch", "thunky_set_while"}) expect_compiles(support, entry);
}

TEST(Nvrtc, ACompileErrorNamesTheKernelAndQuotesTheLog) {
  try {
    compile_ptx({"broken", "extern \"C\" __global__ void broken() { this is not C++; }"}, 90);
    FAIL() << "expected a compile error";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("'broken'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("error"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace thunky::cuda
