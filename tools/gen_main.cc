// thunky-gen PATTERN: writes a schedule.
#include "tools/cli.h"
#include <fstream>
#include <iomanip>
#include <iostream>

#include "core/dtype.h"
#include "sim/machine.h"
#include "tools/gen.h"
#include "tools/sharding.h"
#include "tools/sharding_cost.h"
#include "sim/models_dir.h"

namespace {

using ojson = nlohmann::ordered_json;

int write_schedule(const ojson& s, const std::string& out) {
  if (out.empty()) {
    std::cout << s.dump(2) << "\n";
    std::cout.flush();
    if (!std::cout) return std::cerr << "thunky-gen: cannot write the schedule to standard output\n", 2;
    return 0;
  }
  const std::string error = thunky::write_output_file(out, [&](std::ostream& f) { f << s.dump(2) << "\n"; });
  if (!error.empty()) return std::cerr << out << ": " << error << "\n", 2;
  return 0;
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o << std::setprecision(4);
  if (s >= 1) o << s << " s";
  else if (s >= 1e-3) o << s * 1e3 << " ms";
  else o << s * 1e6 << " us";
  return o.str();
}

struct MatmulArgs {
  std::string mesh, lhs, lhs_spec, rhs, rhs_spec, out_spec, dtype = "bf16", machine, strategy = "auto", models_dir = thunky::sim::models_dir();
};

// thunky-gen matmul: prints the sharding analysis to stderr when the
// schedule goes to stdout, else to stdout.
int matmul(const MatmulArgs& a, const std::string& out) {
  std::ostream& info = out.empty() ? std::cerr : std::cout;
  thunky::gen::MatmulProblem p;
  std::optional<thunky::sim::Machine> machine;
  try {
    p.mesh = thunky::gen::parse_mesh(a.mesh);
    p.lhs = thunky::gen::parse_shape(a.lhs, "--lhs");
    p.rhs = thunky::gen::parse_shape(a.rhs, "--rhs");
    p.lhs_spec = thunky::gen::parse_spec(a.lhs_spec, p.mesh, 2, "--lhs-spec");
    p.rhs_spec = thunky::gen::parse_spec(a.rhs_spec, p.mesh, 2, "--rhs-spec");
    if (!a.out_spec.empty()) p.out_spec = thunky::gen::parse_spec(a.out_spec, p.mesh, 2, "--out-spec");
    p.dtype = a.dtype;
    if (a.strategy == "reduce") p.strategy = thunky::gen::Strategy::reduce;
    if (!a.machine.empty()) {
      auto m = thunky::sim::load_machine(a.machine, a.models_dir);
      if (!m) {
        std::cerr << m.errors().front().str() << "\n";
        return 2;
      }
      machine = m.value();
    }
    thunky::gen::MatmulPlan plan = thunky::gen::plan_matmul(p);
    // Case 2 with one replicated operand: both strategies, and the cheaper
    // one written unless --strategy names one.
    if (plan.is_case2_single && plan.reduce_possible) {
      info << "case 2 strategies: gather (AllGather the sharded operand) or reduce (slice the replicated one along J, multiply, reduce C)\n";
      if (machine) {
        const auto c = thunky::gen::compare_strategies(p, *machine);
        info << "  on " << machine->name << ", nothing overlapping: gather " << seconds_text(c.gather.total_s()) << " (comm "
             << seconds_text(c.gather.comm_s) << ", compute " << seconds_text(c.gather.compute_s) << "), reduce "
             << seconds_text(c.reduce.total_s()) << " (comm " << seconds_text(c.reduce.comm_s) << ", compute "
             << seconds_text(c.reduce.compute_s) << ")\n";
        info << "  cheaper at " << c.batch_name << " = " << c.batch << ": "
             << (c.reduce.total_s() <= c.gather.total_s() ? "reduce" : "gather") << "\n";
        info << "  closed form (C = " << std::setprecision(4) << c.c_flops / 1e12 << " TFLOP/s, W_ici = " << c.w_ici / 1e9
             << " GB/s, C / W_ici = " << c.c_flops / c.w_ici << " FLOP/byte): ";
        if (c.closed_form_batch) info << "reduce is cheaper below " << c.batch_name << " = " << std::setprecision(6) << *c.closed_form_batch << "\n";
        else info << "reduce is cheaper at every " << c.batch_name << "\n";
        info << "  simulated: ";
        if (!c.flip_high) info << "reduce is cheaper at every " << c.batch_name << " tried (up to 2^31, or 2^40 elements an operand)\n";
        else if (!c.flip_low) info << "gather is cheaper from the smallest " << c.batch_name << " tried (" << *c.flip_high << ")\n";
        else info << "reduce is cheaper up to " << c.batch_name << " = " << *c.flip_low << ", gather from " << *c.flip_high << "\n";
        if (a.strategy == "auto" && c.reduce.total_s() < c.gather.total_s()) p.strategy = thunky::gen::Strategy::reduce;
      }
      info << "  writing the " << (p.strategy == thunky::gen::Strategy::reduce ? "reduce" : "gather") << " strategy\n";
      if (p.strategy == thunky::gen::Strategy::reduce) plan = thunky::gen::plan_matmul(p);
    } else if (a.strategy == "reduce") {
      std::cerr << "thunky-gen: --strategy reduce applies to case 2 with one operand replicated on J; this problem is case " << plan.case_number
                << "\n";
      return 2;
    }
    std::optional<thunky::gen::StepCost> cost;
    if (machine) cost = thunky::gen::price_plan(plan, *machine);
    thunky::gen::describe_plan(plan, info, cost ? cost->seconds : std::map<std::string, double>{});
    if (cost) {
      info << "on " << machine->name << ", nothing overlapping: communication " << seconds_text(cost->comm_s) << ", compute "
           << seconds_text(cost->compute_s) << ": " << (cost->comm_s > cost->compute_s ? "communication-bound" : "compute-bound") << "\n";
    }
    return write_schedule(plan.schedule, out);
  } catch (const std::invalid_argument& e) {
    std::cerr << "thunky-gen matmul: " << e.what() << "\n";
    return 2;
  } catch (const thunky::ThunkyError& e) {
    std::cerr << "thunky-gen matmul: " << (machine ? machine->name + ": " : "") << e.what() << "\n";
    return 2;
  }
}

int run_main(int argc, char** argv) {
  thunky::gen::RingMatmulOptions o;
  std::string out, direction = "uni", collective = "all_gather";
  MatmulArgs m;
  CLI::App app{"thunky-gen: write a thunky schedule"};
  app.require_subcommand(1);
  app.add_option("-o,--output", out, "output file (default: stdout)");

  // The collective matmul patterns share their sizes.
  auto sized = [&](const std::string& name, const std::string& help) {
    CLI::App* c = app.add_subcommand(name, help);
    c->add_option("-n,--ranks", o.ranks, "ranks along mesh axis x")->check(CLI::Range(1, 65536));
    c->add_option("--m-block", o.m_block, "rows of C per rank")->check(CLI::Range(1, 1 << 20));
    c->add_option("--k", o.k, "contraction dimension (all_gather: all of it; reduce_scatter: per rank)")->check(CLI::Range(1, 1 << 20));
    c->add_option("--n-block", o.n_block, "columns of B per rank")->check(CLI::Range(1, 1 << 20));
    c->add_option("--dtype", o.dtype, "element type (f32, bf16, f16, ...)");
    c->add_option("--collective", collective, "all_gather (AllGather A, then multiply) or reduce_scatter (multiply, then ReduceScatter C)")
        ->check(CLI::IsMember({"all_gather", "reduce_scatter"}));
    c->add_option("-o,--output", out, "output file (default: stdout)");
    return c;
  };
  CLI::App* ring = sized("ring_matmul", "the collective matmul as a ring of shifts overlapped with GEMMs");
  ring->add_option("--direction", direction, "uni or bi (bidirectional: half the steps, shifts both ways)")->check(CLI::IsMember({"uni", "bi"}));
  ring->add_flag("--literal", o.literal, "bidirectional: the original workspace sizing, min(2, pairs) pair buffers (races at N = 4)");
  CLI::App* bidi = sized("bidirectional_ring_matmul", "ring_matmul --direction bi");
  bidi->add_flag("--literal", o.literal, "the original workspace sizing, min(2, pairs) pair buffers (races at N = 4)");
  CLI::App* blocking = sized("blocking_matmul", "baseline: the collective, then one GEMM");
  CLI::App* unsharded = sized("unsharded_matmul", "baseline: one device's GEMM with no communication");

  CLI::App* mm = app.add_subcommand("matmul", "C = A . B sharded by PartitionSpecs: the case, its collectives and its schedule");
  mm->add_option("--mesh", m.mesh, "mesh axes: X=4,Y=2 or {'X': 4, 'Y': 2}")->required();
  mm->add_option("--lhs", m.lhs, "A's shape, I x J: 8192x28672")->required();
  mm->add_option("--lhs-spec", m.lhs_spec, "A's PartitionSpec: X,Y or None,X+Y or (X,Y),None")->required();
  mm->add_option("--rhs", m.rhs, "B's shape, J x K")->required();
  mm->add_option("--rhs-spec", m.rhs_spec, "B's PartitionSpec")->required();
  mm->add_option("--out-spec", m.out_spec, "C's PartitionSpec (default: as the product leaves it, reduced)");
  mm->add_option("--dtype", m.dtype, "element type (default bf16)");
  mm->add_option("--machine", m.machine, "machine model: prices the collectives and the GEMM");
  mm->add_option("--models", m.models_dir, "directory of machine models");
  mm->add_option("--strategy", m.strategy, "case 2: gather, reduce, or auto (the cheaper on --machine, else gather)")
      ->check(CLI::IsMember({"auto", "gather", "reduce"}));
  mm->add_option("-o,--output", out, "output file (default: stdout)");

  if (auto code = thunky::cli::parse(app, "thunky-gen", argc, argv)) return *code;
  if (mm->parsed()) return matmul(m, out);
  if (!thunky::parse_dtype(o.dtype)) {
    std::cerr << "thunky-gen: --dtype: unknown element type '" << o.dtype << "' (f64 f32 f16 bf16 f8e4m3 f8e5m2 s64 s32 s16 s8 u32 u8 bool)\n";
    return 2;
  }
  const bool rs = collective == "reduce_scatter";
  if (bidi->parsed()) direction = "bi";
  ojson s;
  try {
    if (ring->parsed() || bidi->parsed()) {
      const bool bi = direction == "bi";
      if (rs) s = bi ? thunky::gen::bidirectional_ring_reduce_scatter_matmul(o) : thunky::gen::ring_reduce_scatter_matmul(o);
      else s = bi ? thunky::gen::bidirectional_ring_matmul(o) : thunky::gen::ring_matmul(o);
    } else if (blocking->parsed()) {
      s = rs ? thunky::gen::blocking_reduce_scatter_matmul(o) : thunky::gen::blocking_matmul(o);
    } else if (unsharded->parsed()) {
      s = rs ? thunky::gen::unsharded_reduce_scatter_matmul(o) : thunky::gen::unsharded_matmul(o);
    }
  } catch (const std::exception& e) {
    std::cerr << "thunky-gen: " << e.what() << "\n";
    return 2;
  }
  return write_schedule(s, out);
}

}  // namespace

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-gen", run_main, argc, argv); }
