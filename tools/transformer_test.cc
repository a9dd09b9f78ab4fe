#include "tools/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/load.h"
#include "exec/backend.h"
#include "sim/engine.h"
#include "sim/fold_test_util.h"

namespace thunky::gen {
namespace {

using ojson = nlohmann::ordered_json;

// A small model: 4 layers of hidden 256, 8 heads, vocabulary 1024, 128 tokens.
TransformerOptions small(int64_t tp, int64_t pp, int64_t gpus, int64_t batch) {
  TransformerOptions o;
  o.model = {"small", 4, 256, 8, 8, 1024, 1024, false, 128};
  o.tp = tp, o.pp = pp, o.gpus = gpus, o.global_batch = batch;
  return o;
}

// The while loops named `name`, in program order, wherever they are.
void loops(const ojson& block, const std::string& name, std::vector<ojson>& out) {
  for (const auto& c : block) {
    if (c["op"] == "while" && c.value("name", "") == name) out.push_back(c);
    for (const char* key : {"body", "then", "else", "cond"})
      if (c.contains(key)) loops(c[key], name, out);
    if (c.contains("branches"))
      for (const auto& b : c["branches"]) loops(b, name, out);
  }
}

// A loop body's ops, less the host's counter.
std::vector<std::string> ops_of(const ojson& loop) {
  std::vector<std::string> ops;
  for (const auto& c : loop["body"])
    if (c.value("name", "") != "host loop") ops.push_back(c["op"]);
  return ops;
}

TEST(Transformer, ALayerIsMegatronsCommands) {
  // pp 1, tp 2, 2 micro-batches: the first micro-batch's forward layers
  // loop, then its backward's. Forward with sequence parallelism: norm,
  // all-gather, QKV, attention, projection, reduce-scatter, residual and
  // norm, all-gather, up, activation, down, reduce-scatter, residual: 13.
  std::vector<ojson> found;
  loops(transformer(small(2, 1, 2, 2))["program"], "layers", found);
  ASSERT_GE(found.size(), 2u);
  EXPECT_EQ(found[0]["sim"]["trip_count"], 4);
  EXPECT_EQ(ops_of(found[0]), (std::vector<std::string>{"kernel", "all_gather", "gemm", "kernel", "gemm", "reduce_scatter", "kernel", "all_gather", "gemm",
                                                        "kernel", "gemm", "reduce_scatter", "kernel"}));
  // Backward: the 4 GEMMs' dgrad and wgrad (8); the residual, activation,
  // two norms and attention backward kernels (5); and per GEMM pair an
  // all-gather of the output grad or a re-gather of the norm's output for
  // the wgrad, and per sublayer a reduce-scatter of the input grad (6): 19.
  const std::vector<std::string> backward_ops = ops_of(found[1]);
  EXPECT_EQ(backward_ops.size(), 19u);
  EXPECT_EQ(std::count(backward_ops.begin(), backward_ops.end(), "gemm"), 8);
  EXPECT_EQ(std::count(backward_ops.begin(), backward_ops.end(), "kernel"), 5);
  // Selective recomputation adds the attention's forward; full, the whole
  // layer's 13; tp 1 has no collectives (9 forward, 13 backward).
  auto backward = [](TransformerOptions o) {
    std::vector<ojson> f;
    loops(transformer(o)["program"], "layers", f);
    return ops_of(f[1]).size();
  };
  TransformerOptions o = small(2, 1, 2, 2);
  o.recompute = "selective";
  EXPECT_EQ(backward(o), 20u);
  o.recompute = "full";
  EXPECT_EQ(backward(o), 32u);
  EXPECT_EQ(backward(small(1, 1, 1, 2)), 13u);
}

TEST(Transformer, StagesRunOneForwardOneBackward) {
  // 4 stages of one layer each, 8 micro-batches, on a ring machine: stage s
  // runs 3 - s warmup forwards, then forward and backward in turn, then its
  // 3 - s last backwards (Megatron's 1F1B without interleaving). Read from
  // the simulated timeline: each forward has one "MLP down", each backward
  // one "MLP down dgrad".
  const TransformerOptions o = small(1, 4, 4, 8);
  auto p = load_schedule_text(transformer(o).dump(), "step.json");
  ASSERT_TRUE(p.ok()) << p.errors()[0].str();
  auto r = sim::simulate(*p, sim::model("a100-cluster"), nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  for (int64_t s = 0; s < 4; ++s) {
    std::vector<OpRecord> ops = r->report.timeline(r->report.ranks[static_cast<size_t>(s)]).ops;
    std::sort(ops.begin(), ops.end(), [](const OpRecord& a, const OpRecord& b) { return a.start_s < b.start_s; });
    std::string order;
    for (const auto& op : ops) {
      if (op.name.str() == "MLP down") order += 'F';
      if (op.name.str() == "MLP down dgrad") order += 'B';
    }
    std::string expected(static_cast<size_t>(3 - s), 'F');
    for (int64_t k = 0; k < 8 - (3 - s); ++k) expected += "FB";
    expected += std::string(static_cast<size_t>(3 - s), 'B');
    EXPECT_EQ(order, expected) << "stage " << s;
  }
}

TEST(Transformer, CollectivesMoveWhatTheFormulasSay) {
  // tp 2 pp 2 dp 2 (8 GPUs), micro-batch 1 of 128 tokens, hidden 256, bf16.
  const TransformerOptions o = small(2, 2, 8, 4);
  const ojson s = transformer(o);
  auto elements = [&](const std::string& buffer) {
    int64_t n = 1;
    for (const auto& d : s["buffers"][buffer]["shape"]) n *= d.get<int64_t>();
    return n;
  };
  // Sequence parallelism: a tp all-gather gathers b s h = 128 x 256 from
  // b s h / t = 64 x 256 a rank.
  EXPECT_EQ(elements("xf"), 128 * 256);
  EXPECT_EQ(elements("ln"), 64 * 256);
  // A pipeline send carries the sequence-parallel activation: b s h / t.
  EXPECT_EQ(elements("xin"), 64 * 256);
  // A layer's parameters: QKV 3h^2, projection h^2, MLP 8h^2, norms 4h =
  // 12 x 65536 + 1024 = 787,456; a tp rank's half 393,728. The bucket
  // (40 M parameters) holds both of a stage's two layers: 787,456,
  // reduce-scattered over dp = 2 into 393,728 a rank.
  EXPECT_EQ(layer_params(o.model), 787456.0);
  EXPECT_EQ(elements("grad0"), 787456);
  EXPECT_EQ(elements("gshard0"), 393728);
}

TEST(Transformer, ContextParallelAttentionIsARing) {
  // cp 2 (tp 1, pp 1, 2 GPUs), 256 tokens: each layer's attention is two
  // blocks, the second's keys and values arriving (a shift over cp) while
  // the first computes; backward, the first block's key-value gradients
  // travel with the second's keys, the last's after it. Gradients shard
  // over dp x cp.
  TransformerOptions o = small(1, 1, 2, 2);
  o.cp = 2;
  o.model.seq = 256;
  const ojson s = transformer(o);
  std::vector<ojson> found;
  loops(s["program"], "layers", found);
  ASSERT_GE(found.size(), 2u);
  int blocks = 0, rings = 0;
  for (const auto& c : found[0]["body"]) {
    blocks += c.value("name", "") == "attention block";
    if (c["op"] == "async_start") rings += c["body"][0]["axis"] == "cp" && c["body"][0]["shift"] == 1;
  }
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(rings, 1);
  // A rank's 128 tokens (256 / cp), keys and values of 8 heads of 32: [128, 512].
  EXPECT_EQ(s["buffers"]["kv0"]["shape"], ojson({128, 512}));
  auto p = load_schedule_text(s.dump(), "cp.json");
  ASSERT_TRUE(p.ok()) << p.errors()[0].str();
  sim::expect_same_prediction(*p, sim::model("a100-cluster"));
  // The activations a rank holds halve; the optimizer's shard is over dp x cp.
  TransformerOptions one = o;
  one.cp = 1, one.gpus = 1;
  EXPECT_DOUBLE_EQ(transformer_memory(o).activations, transformer_memory(one).activations / 2);
  EXPECT_DOUBLE_EQ(transformer_memory(o).optimizer, transformer_memory(one).optimizer / 2);
}

TEST(Transformer, TpCommOverlapRingsTheCollectivesBesideGemmChunks) {
  // tp 2, overlapped: the QKV GEMM is two chunks, the second's rows
  // arriving (a tp shift) while the first computes; the projection's
  // reduce-scatter is two chunk GEMMs, a shift and an add.
  TransformerOptions o = small(2, 1, 2, 2);
  o.tp_comm_overlap = true;
  const ojson s = transformer(o);
  std::vector<ojson> found;
  loops(s["program"], "layers", found);
  ASSERT_GE(found.size(), 1u);
  int qkv = 0, rings = 0, gathers = 0;
  for (const auto& c : found[0]["body"]) {
    qkv += c.value("name", "") == "QKV chunk";
    if (c["op"] == "async_start") rings += c["body"][0]["axis"] == "tp";
    gathers += c["op"] == "all_gather" || c["op"] == "reduce_scatter";
  }
  EXPECT_EQ(qkv, 2);
  EXPECT_EQ(rings, 4);    // one shift for each of the 4 GEMMs' 2 chunks
  EXPECT_EQ(gathers, 0);  // no blocking collective left in the forward
  auto p = load_schedule_text(s.dump(), "overlap.json");
  ASSERT_TRUE(p.ok()) << p.errors()[0].str();
  sim::expect_same_prediction(*p, sim::model("h100-cluster"));
  // Llama 2 7B on 8 H100s, tp 8: overlapped, under three quarters of the
  // tp communication stays exposed. (The step itself need not be shorter:
  // GEMMs of an eighth of the rows fill the SMs worse, and each ring step
  // pays a p2p's latency; docs/generators.md.)
  TransformerOptions l;
  l.model = *transformer_preset("llama2-7b");
  l.gpus = 8, l.tp = 8, l.global_batch = 4;
  const sim::Machine m = sim::model("h100-8gpu");
  const StepPrediction plain = predict_step(l, m);
  l.tp_comm_overlap = true;
  const StepPrediction overlapped = predict_step(l, m);
  EXPECT_LT(overlapped.tp_s, 0.75 * plain.tp_s) << overlapped.tp_s << " " << plain.tp_s;
}

TEST(Transformer, Fp8GemmsRunAtTheFp8Rate) {
  // 2 layers of hidden 4096 (32 heads), 2048 tokens, tp 2 on an H100 node:
  // with FP8 the layers' GEMMs take e4m3 operands (weights and the
  // activations the kernels before them write), the logits and the
  // residual stream stay bf16, and a QKV GEMM ([2048, 4096] x [4096,
  // 6144], 103 GFLOP) runs at the 1,979 TFLOP/s e4m3 peak instead of
  // bf16's 989: in well under 3/4 of the time.
  TransformerOptions o;
  o.model = {"mid", 2, 4096, 32, 32, 16384, 32000, false, 2048};
  o.gpus = 2, o.tp = 2, o.global_batch = 1;
  auto qkv_seconds = [&](bool fp8) {
    o.fp8 = fp8;
    const ojson s = transformer(o);
    EXPECT_EQ(s["buffers"]["w_qkv"]["dtype"], fp8 ? "f8e4m3" : "bf16");
    EXPECT_EQ(s["buffers"]["x"]["dtype"], "bf16");
    auto p = load_schedule_text(s.dump(), "fp8.json");
    EXPECT_TRUE(p.ok()) << p.errors()[0].str();
    auto r = sim::simulate(*p, sim::model("h100-8gpu"), nullptr);
    EXPECT_TRUE(r.ok());
    for (const auto& op : r->report.timeline(r->report.ranks[0]).ops)
      if (op.name.str() == "QKV") return op.end_s - op.start_s;
    return -1.0;
  };
  const double bf16 = qkv_seconds(false), fp8 = qkv_seconds(true);
  ASSERT_GT(fp8, 0);
  EXPECT_LT(fp8, 0.75 * bf16) << fp8 << " " << bf16;
  // An FP8 copy of the weights: 3 bytes a parameter, not 2.
  o.fp8 = true;
  TransformerOptions plain = o;
  plain.fp8 = false;
  EXPECT_DOUBLE_EQ(transformer_memory(o).weights, 1.5 * transformer_memory(plain).weights);
}

TEST(Transformer, MemoryFollowsKorthikantiAndTheDistributedOptimizer) {
  TransformerOptions o;
  o.model = *transformer_preset("gpt3-175b");
  o.gpus = 64, o.tp = 8, o.pp = 8, o.global_batch = 64, o.recompute = "selective";
  const TransformerMemory m = transformer_memory(o);
  // Stage 0: 12 layers of 12 h^2 + 4 h (h = 12288: 1,811,988,480) and the
  // embedding's 51200 x 12288 = 629,145,600, over tp 8: 2,796,625,920
  // parameters. bf16 weights 2 bytes, fp32 gradients 4, and (dp 1) the
  // optimizer's 12.
  const double params = (12 * 1811988480.0 + 629145600.0) / 8;
  EXPECT_DOUBLE_EQ(m.weights, 2 * params);
  EXPECT_DOUBLE_EQ(m.gradients, 4 * params);
  EXPECT_DOUBLE_EQ(m.optimizer, 12 * params);
  // Selective: s b h 34 / t a layer, all 96 layers' worth on stage 0:
  // 2048 x 12288 x 34 / 8 x 96 = 10,267,656,192 bytes (Korthikanti's 10.3 GB).
  EXPECT_DOUBLE_EQ(m.activations, 10267656192.0);
  // Full: the layer's input, 2 s b h / t: 603,979,776 bytes.
  o.recompute = "full";
  EXPECT_DOUBLE_EQ(transformer_memory(o).activations, 603979776.0);
  // None: s b h (34 / t + 5 a s / (h t)) = 2048 x 12288 x (4.25 + 5 x 96 x
  // 2048 / (12288 x 8)) = 2048 x 12288 x 14.25 a layer.
  o.recompute = "none";
  EXPECT_DOUBLE_EQ(transformer_memory(o).activations, 2048.0 * 12288 * 14.25 * 96);
  // The ZeRO paper's 16 bytes a parameter with the optimizer state split
  // over dp 8 (stage 1): 2 + 4 + 12 / 8 bytes.
  o.gpus = 512, o.global_batch = 512;
  const TransformerMemory z = transformer_memory(o);
  EXPECT_DOUBLE_EQ(z.weights + z.gradients + z.optimizer, (6 + 12.0 / 8) * params);
}

TEST(Transformer, PredictsGpt3OnA100WithinTenPercentOfThePublishedStep) {
  // Korthikanti et al. 2022, Table 5: GPT-3 175B on 64 A100 (TP 8, PP 8,
  // global batch 64, sequence 2048): 18.13 s a step with full
  // recomputation, 13.75 s with sequence parallelism and selective
  // recomputation (their pipeline interleaved 3 stages a GPU; this one
  // does not, and has the larger bubble).
  TransformerOptions o;
  o.model = *transformer_preset("gpt3-175b");
  o.gpus = 64, o.tp = 8, o.pp = 8, o.global_batch = 64;
  const sim::Machine m = sim::model("a100-cluster");
  for (auto [recompute, published] : {std::pair{"full", 18.13}, {"selective", 13.75}}) {
    o.recompute = recompute;
    const StepPrediction r = predict_step(o, m);
    EXPECT_NEAR(r.step_s, published, 0.10 * published) << recompute;
    // A class of ranks a stage.
    EXPECT_EQ(r.classes, 8);
    // The breakdown adds up to the step (each part of it once).
    EXPECT_NEAR(r.compute_s + r.tp_s + r.cp_s + r.pp_s + r.dp_s + r.bubble_s + r.optimizer_s, r.step_s, 1e-6 * r.step_s);
    // Model FLOPs: 72 B s L h^2 (1 + s/6h + V/12hL) for GPT-3 (with biases'
    // and norms' 4h a layer left out, as Megatron's formula does).
    const double B = 64, s = 2048, L = 96, h = 12288, V = 51200;
    EXPECT_NEAR(transformer_model_flops(o), 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L)), 1e-9 * transformer_model_flops(o));
    EXPECT_NEAR(r.model_tflops_per_gpu, transformer_model_flops(o) / r.step_s / 64 / 1e12, 1e-9);
  }
}

TEST(Transformer, RefusesLayoutsThatDoNotDivideOrFit) {
  TransformerOptions o;
  o.model = *transformer_preset("gpt3-175b");
  o.gpus = 40, o.tp = 5, o.pp = 8;
  try {
    transformer_layout(o);
    ADD_FAILURE() << "tp 5 of 96 heads accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("heads"), std::string::npos) << e.what();
  }
  // On 8 GPUs (tp 8, one stage): 175 B parameters at 18 bytes over 8 GPUs
  // is 390 GB a GPU, past an A100's 80.
  o.gpus = 8, o.tp = 8, o.pp = 1, o.global_batch = 8;
  try {
    predict_step(o, sim::model("a100-cluster"));
    ADD_FAILURE() << "175B on 8 GPUs fitted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("past the 80 GB of a100-cluster"), std::string::npos) << e.what();
  }
}

TEST(Transformer, AStepIsValidRunsOnTheCpuBackendAndFoldsExactly) {
  // A tiny step (tp 2, pp 2, dp 2): valid on every rank, run for real on
  // the cpu backend with the same commands the simulator predicts, and
  // folded into a class a stage with every rank's prediction.
  TransformerOptions o = small(2, 2, 8, 4);
  o.model = {"tiny", 4, 64, 4, 4, 256, 256, false, 32};
  auto p = load_schedule_text(transformer(o).dump(), "step.json");
  ASSERT_TRUE(p.ok()) << p.errors()[0].str();
  auto run = make_cpu_backend()->run(*p, {});
  ASSERT_TRUE(run.ok()) << run.errors()[0].str();
  const sim::Machine m = sim::model("a100-cluster");
  auto predicted = sim::simulate(*p, m, nullptr);
  ASSERT_TRUE(predicted.ok());
  for (size_t r = 0; r < 8; ++r)
    EXPECT_EQ(run->report.timeline(run->report.ranks[r]).ops.size(), predicted->report.timeline(predicted->report.ranks[r]).ops.size()) << r;
  EXPECT_EQ(predicted->classes.count(), 2);
  sim::expect_same_prediction(*p, m);
}

}  // namespace
}  // namespace thunky::gen
