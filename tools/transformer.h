// thunky-gen transformer: one global training step of a decoder-only
// transformer as Megatron-Core issues it (docs/generators.md, "A training
// step"): tensor parallelism with sequence parallelism, a 1F1B pipeline,
// data parallelism with the distributed optimizer, and recomputation, as
// the GEMMs, kernels, maps and collectives each rank runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace thunky::gen {

// A model's architecture, as its paper or model card gives it.
struct TransformerModel {
  std::string name;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  bool swiglu = false;  // SwiGLU (two up projections) rather than GELU
  int64_t seq = 2048;   // the sequence length it was trained at
};

// The presets by name (gpt3-175b, llama3-70b, ...); nullopt for another.
std::optional<TransformerModel> transformer_preset(const std::string& name);
std::vector<std::string> transformer_presets();

struct TransformerOptions {
  TransformerModel model;
  int64_t seq = 0;  // 0: the model's
  int64_t micro_batch = 1, global_batch = 0, gpus = 8;
  int64_t tp = 1, pp = 1, cp = 1;
  std::string recompute = "none";  // none, selective (attention), full (each layer)
  std::string dtype = "bf16";
  // Transformer Engine's userbuffers: the tp all-gathers and reduce-
  // scatters beside their GEMMs as rings of chunks.
  bool tp_comm_overlap = false;
  // FP8 GEMMs (e4m3 operands at the machine's f8e4m3 rate), as Transformer
  // Engine's recipe; `dtype` stays the training dtype.
  bool fp8 = false;
  // Gradients are reduce-scattered over dp in buckets of this many
  // parameters (Megatron's default bucket, 40 M).
  int64_t bucket_params = 40'000'000;
};

// The parallel layout a run has: dp = gpus / (tp pp cp), micro-batches m =
// global batch / (micro-batch x dp).
struct TransformerLayout {
  int64_t dp = 1, micro_batches = 1, layers_per_stage = 1, seq = 0;
};

// Checks that the layout divides: heads and kv heads by tp, layers by pp,
// GPUs by tp pp cp, the global batch by micro-batch x dp, the sequence by
// tp x cp; throws std::invalid_argument saying which does not.
TransformerLayout transformer_layout(const TransformerOptions& o);

// Each rank's peak memory in bytes (the first stage's, which holds the most
// micro-batches' activations), by Korthikanti et al. (2022) for the
// activations and the distributed optimizer's 6 + 12/dp bytes a parameter.
struct TransformerMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};
TransformerMemory transformer_memory(const TransformerOptions& o);

// Parameters of the whole model, and of one layer.
double transformer_params(const TransformerModel& m);
double layer_params(const TransformerModel& m);

// Model FLOPs of one step (forward and backward, no recomputation): per
// layer and token 6 x 2 x its GEMM parameters' worth plus attention's
// 12 s h (not halved for causality), plus the logits' 6 h V. For GPT-3
// this is Megatron-LM's 72 B s L h^2 (1 + s/6h + V/12hL).
double transformer_model_flops(const TransformerOptions& o);

// The schedule of one step on mesh {pp, dp, cp, tp} (tp innermost, as
// Megatron places ranks).
nlohmann::ordered_json transformer(const TransformerOptions& o);

}  // namespace thunky::gen

namespace thunky::sim {
struct Machine;
}

namespace thunky::gen {

// One step predicted by thunky-sim on a machine model, and where stage 0's
// time went: its compute (kernels and GEMMs), the communication of each
// parallelism not hidden behind compute (the transfer of tp's, pp's and
// dp's collectives outside compute), the pipeline bubble (neither
// computing nor moving data: waiting for other stages), and the optimizer.
// Each collective counts for the parallelism its name starts with (tp,
// cp, pp, dp).
struct StepPrediction {
  double step_s = 0, tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0, mfu = 0;
  double compute_s = 0, tp_s = 0, cp_s = 0, pp_s = 0, dp_s = 0, bubble_s = 0, optimizer_s = 0;
  TransformerMemory memory;
  int64_t classes = 0;  // of ranks, as thunky-sim folded them
};
// Throws std::invalid_argument for a layout that does not divide or does
// not fit the machine's memory, std::runtime_error when the simulation fails.
StepPrediction predict_step(const TransformerOptions& o, const sim::Machine& m);

}  // namespace thunky::gen
