// thunky-gen PATTERN: writes a schedule.
#include "tools/cli.h"
#include <fstream>
#include <iostream>

#include "core/dtype.h"
#include "tools/gen.h"

int main(int argc, char** argv) {
  thunky::gen::RingMatmulOptions o;
  std::string pattern, out;
  CLI::App app{"thunky-gen: write a thunky schedule"};
  app.add_option("PATTERN", pattern, "ring_matmul | bidirectional_ring_matmul | blocking_matmul")->required();
  app.add_option("-n,--ranks", o.ranks, "ranks along mesh axis x")->check(CLI::Range(1, 65536));
  app.add_option("--m-block", o.m_block, "rows of A per rank")->check(CLI::Range(1, 1 << 20));
  app.add_option("--k", o.k, "contraction dimension")->check(CLI::Range(1, 1 << 20));
  app.add_option("--n-block", o.n_block, "columns of B per rank")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dtype", o.dtype, "element type (f32, bf16, f16, ...)");
  app.add_flag("--literal", o.literal, "bidirectional: the guide's literal workspace sizing");
  app.add_option("-o,--output", out, "output file (default: stdout)");
  if (auto code = thunky::cli::parse(app, "thunky-gen", argc, argv)) return *code;
  if (!thunky::parse_dtype(o.dtype)) {
    std::cerr << "thunky-gen: --dtype: unknown element type '" << o.dtype << "' (f64 f32 f16 bf16 f8e4m3 f8e5m2 s64 s32 s16 s8 u32 u8 bool)\n";
    return 2;
  }
  nlohmann::ordered_json s;
  try {
    if (pattern == "ring_matmul") s = thunky::gen::ring_matmul(o);
    else if (pattern == "bidirectional_ring_matmul") s = thunky::gen::bidirectional_ring_matmul(o);
    else if (pattern == "blocking_matmul") s = thunky::gen::blocking_matmul(o);
    else {
      std::cerr << "thunky-gen: unknown pattern '" << pattern << "' (ring_matmul, bidirectional_ring_matmul, blocking_matmul)\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "thunky-gen: " << e.what() << "\n";
    return 2;
  }
  if (out.empty()) {
    std::cout << s.dump(2) << "\n";
    std::cout.flush();
    if (!std::cout) return std::cerr << "thunky-gen: cannot write the schedule to standard output\n", 2;
    return 0;
  }
  std::ofstream f(out);
  f << s.dump(2) << "\n";
  f.close();
  if (!f) {
    std::cerr << out << ": cannot write\n";
    return 2;
  }
  return 0;
}
