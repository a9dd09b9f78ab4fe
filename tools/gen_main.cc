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
#include "tools/transformer.h"
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

struct TransformerArgs {
  thunky::gen::TransformerOptions o;
  std::string model, ffn_kind = "gelu", machine, models_dir = thunky::sim::models_dir();
  std::vector<std::string> sweep;
};

std::string gb(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / 1e9 << " GB";
  return s.str();
}

// The layouts of a sweep: each "tp=1,2,4" list crossed with the others.
std::vector<thunky::gen::TransformerOptions> sweep_layouts(const thunky::gen::TransformerOptions& base, const std::vector<std::string>& sweep) {
  std::vector<thunky::gen::TransformerOptions> out{base};
  for (const std::string& term : sweep) {
    const size_t eq = term.find('=');
    const std::string key = term.substr(0, eq);
    if (eq == std::string::npos || (key != "tp" && key != "pp" && key != "micro-batch"))
      throw std::invalid_argument("--sweep: '" + term + "' is not tp=..., pp=... or micro-batch=... (a list such as tp=1,2,4,8)");
    std::vector<thunky::gen::TransformerOptions> next;
    std::stringstream values(term.substr(eq + 1));
    for (std::string v; std::getline(values, v, ',');) {
      int64_t x = 0;
      try {
        x = std::stoll(v);
      } catch (const std::exception&) {
        throw std::invalid_argument("--sweep: '" + v + "' in '" + term + "' is not a number");
      }
      if (x < 1 || x > 65536) throw std::invalid_argument("--sweep: " + v + " is out of range (1 to 65536)");
      for (auto o : out) {
        (key == "tp" ? o.tp : key == "pp" ? o.pp : o.micro_batch) = x;
        next.push_back(o);
        if (next.size() > 256) throw std::invalid_argument("--sweep: more than 256 layouts; sweep fewer values");
      }
    }
    out = next;
  }
  return out;
}

// thunky-gen transformer: writes one step's schedule; with --machine,
// prints its predicted step time and where it goes (on stderr when the
// schedule goes to stdout); with --sweep, the step time of each layout.
int transformer(TransformerArgs a, const std::string& out) {
  std::ostream& info = out.empty() ? std::cerr : std::cout;
  thunky::gen::TransformerOptions& o = a.o;
  if (!a.model.empty()) {
    auto preset = thunky::gen::transformer_preset(a.model);
    if (!preset) {
      std::cerr << "thunky-gen transformer: --model: unknown model '" << a.model << "' (";
      for (const auto& n : thunky::gen::transformer_presets()) std::cerr << n << (n == thunky::gen::transformer_presets().back() ? "" : ", ");
      return std::cerr << ")\n", 2;
    }
    // Explicit sizes override the preset's.
    thunky::gen::TransformerModel& m = o.model;
    const thunky::gen::TransformerModel given = m;
    m = *preset;
    for (auto [field, value] : {std::pair{&m.layers, given.layers}, {&m.hidden, given.hidden}, {&m.heads, given.heads}, {&m.kv_heads, given.kv_heads},
                                {&m.ffn, given.ffn}, {&m.vocab, given.vocab}})
      if (value > 0) *field = value;
  } else {
    o.model.name = "transformer";
    o.model.swiglu = a.ffn_kind == "swiglu";
    if (o.model.kv_heads == 0) o.model.kv_heads = o.model.heads;
    if (o.model.ffn == 0) o.model.ffn = 4 * o.model.hidden;
  }
  if (o.dtype == "fp8") o.fp8 = true, o.dtype = "bf16";
  if (!thunky::parse_dtype(o.dtype) || (o.dtype != "bf16" && o.dtype != "f16" && o.dtype != "f32"))
    return std::cerr << "thunky-gen transformer: --precision: bf16, f16, f32 or fp8\n", 2;
  std::optional<thunky::sim::Machine> machine;
  if (!a.machine.empty()) {
    auto m = thunky::sim::load_machine(a.machine, a.models_dir);
    if (!m) {
      for (const auto& e : m.errors()) std::cerr << e.str() << "\n";
      return 2;
    }
    machine = *m;
  }
  try {
    if (!a.sweep.empty()) {
      if (!machine) throw std::invalid_argument("--sweep needs --machine");
      const auto layouts = sweep_layouts(o, a.sweep);
      std::cout << "layout                     step_s   tokens/s/GPU  TFLOP/s/GPU     MFU   memory/GPU  or why not\n";
      for (const auto& layout : layouts) {
        char name[64];
        std::snprintf(name, sizeof name, "tp %lld pp %lld mb %lld", static_cast<long long>(layout.tp), static_cast<long long>(layout.pp),
                      static_cast<long long>(layout.micro_batch));
        try {
          const thunky::gen::StepPrediction r = thunky::gen::predict_step(layout, *machine);
          char line[256];
          std::snprintf(line, sizeof line, "%-24s %8.3f %14.0f %12.1f %6.1f%% %12s\n", name, r.step_s, r.tokens_per_s_per_gpu, r.model_tflops_per_gpu, 100 * r.mfu,
                        gb(r.memory.total()).c_str());
          std::cout << line;
        } catch (const std::invalid_argument& e) {
          std::cout << std::left << std::setw(24) << name << std::right << "  does not fit: " << e.what() << "\n";
        }
      }
      return 0;
    }
    const thunky::gen::TransformerLayout l = thunky::gen::transformer_layout(o);
    const ojson s = thunky::gen::transformer(o);
    if (machine) {
      const thunky::gen::StepPrediction r = thunky::gen::predict_step(o, *machine);
      auto line = [&](const char* what, double s) {
        info << "  " << std::left << std::setw(28) << what << std::right << std::setw(10) << std::fixed << std::setprecision(3) << s << " s  "
             << std::setw(5) << std::setprecision(1) << 100 * s / r.step_s << "%\n";
      };
      info << o.model.name << " on " << o.gpus << " GPUs of " << machine->name << ": tp " << o.tp << " pp " << o.pp << " dp " << l.dp << ", "
           << l.micro_batches << " micro-batches of " << o.micro_batch << " x " << l.seq << " tokens, recompute " << o.recompute << "\n";
      info << std::fixed << std::setprecision(3) << "step time             " << r.step_s << " s\n"
           << std::setprecision(0) << "tokens/s/GPU          " << r.tokens_per_s_per_gpu << "\n"
           << std::setprecision(1) << "model TFLOP/s/GPU     " << r.model_tflops_per_gpu
           << " (6 flops a parameter and token, and attention's 12 s h a layer and token: Megatron-LM's 72 B s L h^2 (1 + s/6h + V/12hL) for GPT)\n"
           << "MFU                   " << 100 * r.mfu << "% of " << machine->peak(*thunky::parse_dtype(o.dtype)) / 1e12 << " TFLOP/s " << o.dtype
           << (o.fp8 ? " (the training dtype's peak, as FP8 runs report it)" : "") << "\n"
           << "where stage 0's step goes:\n";
      line("compute", r.compute_s);
      line("exposed TP communication", r.tp_s);
      if (o.cp > 1) line("exposed CP communication", r.cp_s);
      line("exposed PP communication", r.pp_s);
      line("exposed DP communication", r.dp_s);
      line("pipeline bubble", r.bubble_s);
      line("optimizer", r.optimizer_s);
      info << "memory per GPU (stage 0): weights " << gb(r.memory.weights) << ", gradients " << gb(r.memory.gradients) << ", optimizer " << gb(r.memory.optimizer)
           << ", activations " << gb(r.memory.activations) << ": " << gb(r.memory.total())
           << (machine->hbm_bytes > 0 ? " of " + gb(machine->hbm_bytes) : std::string()) << "\n"
           << "simulated as " << r.classes << " classes of ranks (thunky-sim --explain-folding)\n";
    }
    return write_schedule(s, out);
  } catch (const std::invalid_argument& e) {
    std::cerr << "thunky-gen transformer: " << e.what() << "\n";
    return 2;
  } catch (const std::runtime_error& e) {
    std::cerr << "thunky-gen transformer: " << e.what() << "\n";
    return 1;
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

  TransformerArgs ta;
  CLI::App* tf = app.add_subcommand("transformer", "one training step of a decoder-only transformer as Megatron-Core runs it (tp with sequence parallelism, 1F1B pp, dp with the distributed optimizer)");
  tf->add_option("--model", ta.model, "a preset: gpt3-175b, gpt3-20b, turing-nlg-530b, megatron-1t, llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, llama3.1-405b");
  tf->add_option("--layers", ta.o.model.layers, "layers")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  tf->add_option("--hidden", ta.o.model.hidden, "hidden size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  tf->add_option("--heads", ta.o.model.heads, "attention heads")->check(CLI::Range(int64_t{1}, int64_t{1} << 14));
  tf->add_option("--kv-heads", ta.o.model.kv_heads, "key-value heads (grouped-query attention; default: the heads)")->check(CLI::Range(int64_t{1}, int64_t{1} << 14));
  tf->add_option("--ffn", ta.o.model.ffn, "FFN size (default 4 x hidden)")->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
  tf->add_option("--vocab", ta.o.model.vocab, "vocabulary")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  tf->add_option("--ffn-kind", ta.ffn_kind, "gelu or swiglu")->check(CLI::IsMember({"gelu", "swiglu"}));
  tf->add_option("--seq", ta.o.seq, "sequence length (default: the model's)")->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
  tf->add_option("--micro-batch", ta.o.micro_batch, "micro-batch size (default 1)")->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  tf->add_option("--global-batch", ta.o.global_batch, "global batch in sequences (default: micro-batch x dp x pp)")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  tf->add_option("--gpus", ta.o.gpus, "GPUs (default 8)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  tf->add_option("--tp", ta.o.tp, "tensor parallel size (sequence parallel on)")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  tf->add_option("--pp", ta.o.pp, "pipeline stages (1F1B)")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  tf->add_option("--cp", ta.o.cp, "context parallel size: ring attention over the sequence's cp chunks")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  tf->add_flag("--tp-comm-overlap", ta.o.tp_comm_overlap, "the tp all-gathers and reduce-scatters as rings of chunks beside their GEMMs' chunks, as Transformer Engine's userbuffers");
  tf->add_option("--recompute", ta.o.recompute, "none, selective (attention) or full (each layer)")->check(CLI::IsMember({"none", "selective", "full"}));
  tf->add_option("--precision", ta.o.dtype, "bf16 (default), f16, f32, or fp8 (the layers' GEMMs on e4m3 operands, training in bf16)");
  tf->add_option("--machine", ta.machine, "machine model: predicts the step time and where it goes");
  tf->add_option("--models", ta.models_dir, "directory of machine models");
  tf->add_option("--sweep", ta.sweep, "with --machine: the predicted step of each layout, e.g. --sweep tp=1,2,4,8 pp=1,2,4,8")->expected(1, 8);
  tf->add_option("-o,--output", out, "output file (default: stdout)");

  if (auto code = thunky::cli::parse(app, "thunky-gen", argc, argv)) return *code;
  if (mm->parsed()) return matmul(m, out);
  if (tf->parsed()) return transformer(ta, out);
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
