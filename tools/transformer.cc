#include "tools/transformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace thunky::gen {

namespace {

using ojson = nlohmann::ordered_json;

// Published architectures: GPT-3 (Brown et al. 2020, Table 2.1), NeMo's
// GPT-3 20B, Turing-NLG 530B and Megatron's 1T (Korthikanti et al. 2022,
// Table 3), Llama 2 (Touvron et al. 2023) and Llama 3 / 3.1 (Meta's model
// cards).
const TransformerModel kPresets[] = {
    {"gpt3-175b", 96, 12288, 96, 96, 49152, 51200, false, 2048},
    {"gpt3-20b", 44, 6144, 48, 48, 24576, 51200, false, 2048},
    {"turing-nlg-530b", 105, 20480, 128, 128, 81920, 51200, false, 2048},
    {"megatron-1t", 128, 25600, 160, 160, 102400, 51200, false, 2048},
    {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, true, 4096},
    {"llama2-13b", 40, 5120, 40, 40, 13824, 32000, true, 4096},
    {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, true, 4096},
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, true, 8192},
    {"llama3-70b", 80, 8192, 64, 8, 28672, 128256, true, 8192},
    {"llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, true, 8192},
};

}  // namespace

std::optional<TransformerModel> transformer_preset(const std::string& name) {
  for (const auto& m : kPresets)
    if (m.name == name) return m;
  return std::nullopt;
}

std::vector<std::string> transformer_presets() {
  std::vector<std::string> names;
  for (const auto& m : kPresets) names.push_back(m.name);
  return names;
}

double layer_params(const TransformerModel& m) {
  const double h = static_cast<double>(m.hidden), dh = h / static_cast<double>(m.heads);
  const double qkv = h * (static_cast<double>(m.heads) + 2.0 * static_cast<double>(m.kv_heads)) * dh;
  const double mlp = h * static_cast<double>(m.ffn) * (m.swiglu ? 3.0 : 2.0);
  return qkv + h * h + mlp + 4.0 * h;  // and two layer norms' scale and bias
}

double transformer_params(const TransformerModel& m) {
  return static_cast<double>(m.layers) * layer_params(m) + static_cast<double>(m.vocab) * static_cast<double>(m.hidden);
}

TransformerLayout transformer_layout(const TransformerOptions& o) {
  const TransformerModel& m = o.model;
  auto need = [](bool ok, const std::string& why) {
    if (!ok) throw std::invalid_argument(why);
  };
  need(m.layers > 0 && m.hidden > 0 && m.heads > 0 && m.kv_heads > 0 && m.ffn > 0 && m.vocab > 0, "the model needs --layers, --hidden, --heads, --ffn and --vocab (or --model)");
  need(m.hidden % m.heads == 0, "--hidden " + std::to_string(m.hidden) + " is not a multiple of --heads " + std::to_string(m.heads));
  need(m.heads % m.kv_heads == 0, "--heads is not a multiple of --kv-heads");
  need(o.tp >= 1 && o.pp >= 1 && o.cp >= 1 && o.micro_batch >= 1 && o.gpus >= 1, "tp, pp, cp, micro-batch and GPUs are at least 1");
  need(o.gpus % (o.tp * o.pp * o.cp) == 0, std::to_string(o.gpus) + " GPUs are not a multiple of tp x pp x cp = " + std::to_string(o.tp * o.pp * o.cp));
  need(m.heads % o.tp == 0 && m.kv_heads % o.tp == 0 && m.ffn % o.tp == 0 && m.vocab % o.tp == 0,
       "tp " + std::to_string(o.tp) + " does not divide the heads (" + std::to_string(m.heads) + "), kv heads (" + std::to_string(m.kv_heads) + "), FFN or vocabulary");
  need(m.layers % o.pp == 0, "pp " + std::to_string(o.pp) + " does not divide the " + std::to_string(m.layers) + " layers");
  TransformerLayout l;
  l.seq = o.seq > 0 ? o.seq : m.seq;
  need(l.seq % (o.tp * o.cp * (o.cp > 1 ? 2 : 1)) == 0,
       "the sequence (" + std::to_string(l.seq) + ") is not a multiple of tp x cp" + (o.cp > 1 ? " x 2" : "") +
           " (sequence parallelism splits it by tp; context parallelism into 2 cp chunks, two a rank, for causal balance)");
  l.dp = o.gpus / (o.tp * o.pp * o.cp);
  const int64_t batch = o.global_batch > 0 ? o.global_batch : o.micro_batch * l.dp * o.pp;
  need(batch % (o.micro_batch * l.dp) == 0, "the global batch " + std::to_string(batch) + " is not a multiple of micro-batch x dp = " + std::to_string(o.micro_batch * l.dp));
  l.micro_batches = batch / (o.micro_batch * l.dp);
  need(l.micro_batches >= o.pp, std::to_string(l.micro_batches) + " micro-batches cannot fill " + std::to_string(o.pp) + " pipeline stages (1F1B needs at least one a stage)");
  l.layers_per_stage = m.layers / o.pp;
  // A rank's largest buffers (a weight, the logits) within what a schedule
  // may declare.
  const double tokens = static_cast<double>(o.micro_batch) * static_cast<double>(l.seq) / static_cast<double>(o.cp);
  const double up = static_cast<double>(m.ffn) * (m.swiglu ? 2.0 : 1.0) / static_cast<double>(o.tp);
  const double largest = std::max({static_cast<double>(m.hidden) * up, tokens * up, tokens * static_cast<double>(m.vocab) / static_cast<double>(o.tp),
                                   static_cast<double>(m.hidden) * static_cast<double>(m.vocab) / static_cast<double>(o.tp),
                                   static_cast<double>(m.hidden) * static_cast<double>(m.hidden + 2 * m.kv_heads * (m.hidden / m.heads)) / static_cast<double>(o.tp)});
  need(largest <= std::ldexp(1.0, 40), "a rank's buffers would pass 2^40 elements (a weight or the logits): raise --tp or lower the sizes");
  need(o.recompute == "none" || o.recompute == "selective" || o.recompute == "full", "--recompute is none, selective or full");
  return l;
}

double transformer_model_flops(const TransformerOptions& o) {
  const TransformerLayout l = transformer_layout(o);
  const TransformerModel& m = o.model;
  const double tokens = static_cast<double>(l.micro_batches * o.micro_batch * l.dp) * static_cast<double>(l.seq);
  const double h = static_cast<double>(m.hidden), s = static_cast<double>(l.seq);
  const double gemm_params = layer_params(m) - 4.0 * h;
  // Forward: 2 flops a parameter and token, attention's 4 s h a token
  // (QK^T and AV); backward twice the forward.
  return 3.0 * tokens * (static_cast<double>(m.layers) * (2.0 * gemm_params + 4.0 * s * h) + 2.0 * h * static_cast<double>(m.vocab));
}

TransformerMemory transformer_memory(const TransformerOptions& o) {
  const TransformerLayout l = transformer_layout(o);
  const TransformerModel& m = o.model;
  const double t = static_cast<double>(o.tp), dp = static_cast<double>(l.dp);
  // The first stage: its layers and the embedding, split by tp.
  const double params = (static_cast<double>(l.layers_per_stage) * layer_params(m) + static_cast<double>(m.vocab) * static_cast<double>(m.hidden)) / t;
  TransformerMemory r;
  // Megatron's distributed optimizer: bf16 weights (2 bytes), fp32 main
  // gradients (4), and the fp32 master copy, Adam's m and v (12) split
  // over dp (Korthikanti et al.; the ZeRO paper's 16 bytes, stage 1).
  r.weights = (o.fp8 ? 3 : 2) * params;  // FP8: an e4m3 copy of the weights beside the bf16 ones
  r.gradients = 4 * params;
  r.optimizer = 12 * params / (dp * static_cast<double>(o.cp));
  // Activations a layer holds (Korthikanti et al. 2022, sec. 4.2.2, with
  // tensor and sequence parallelism): s b h (34/t + 5 a s/(h t)) bytes
  // (split cp ways by context parallelism);
  // selective recomputation keeps s b h 34/t; full keeps the layer's input,
  // 2 s b h / t. The first stage of a 1F1B pipeline holds pp micro-batches
  // of its L/pp layers: L layers' worth.
  const double s = static_cast<double>(l.seq), b = static_cast<double>(o.micro_batch), h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads);
  double per_layer = s * b * h * (34.0 / t + 5.0 * a * s / (h * t));
  if (o.recompute == "selective") per_layer = s * b * h * 34.0 / t;
  if (o.recompute == "full") per_layer = 2.0 * s * b * h / t;
  // Context parallelism splits the sequence, and so each layer's activations, cp ways.
  r.activations = per_layer * static_cast<double>(m.layers) / static_cast<double>(o.cp);
  return r;
}

namespace {

// Builds one step's schedule: buffers as each rank holds them, and each
// pipeline stage's program.
class Step {
 public:
  Step(const TransformerOptions& o) : o_(o), l_(transformer_layout(o)), m_(o.model) {
    const int64_t t = o.tp;
    tokens_ = o.micro_batch * l_.seq / o.cp;
    sp_ = tokens_ / t;
    const int64_t dh = m_.hidden / m_.heads;
    qkv_ = (m_.heads + 2 * m_.kv_heads) * dh / t;
    kv_ = 2 * m_.kv_heads * dh / t;
    up_ = m_.ffn * (m_.swiglu ? 2 : 1) / t;
    ffn_ = m_.ffn / t;
    const int64_t h = m_.hidden;
    for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"x", {sp_, h}}, {"ln", {sp_, h}}, {"xf", {tokens_, h}}, {"xo", {tokens_, h}}, {"qkv", {tokens_, qkv_}}, {"ctx", {tokens_, h / t}}, {"yf", {tokens_, h}},
             {"y", {sp_, h}}, {"h1", {tokens_, up_}}, {"h2", {tokens_, ffn_}}, {"w_qkv", {h, qkv_}}, {"w_o", {h / t, h}}, {"w_1", {h, up_}},
             {"w_2", {ffn_, h}}, {"dx", {sp_, h}}, {"dy", {sp_, h}}, {"dls", {sp_, h}}, {"dyf", {tokens_, h}}, {"dxf", {tokens_, h}},
             {"dqkv", {tokens_, qkv_}}, {"dctx", {tokens_, h / t}}, {"dh1", {tokens_, up_}}, {"dh2", {tokens_, ffn_}}, {"dw_qkv", {h, qkv_}},
             {"dw_o", {h / t, h}}, {"dw_1", {h, up_}}, {"dw_2", {ffn_, h}}, {"w_out", {h, m_.vocab / t}}, {"logits", {tokens_, m_.vocab / t}},
             {"dw_out", {h, m_.vocab / t}}, {"loss", {tokens_}}, {"xin", {sp_, h}}, {"dxin", {sp_, h}}, {"kv0", {tokens_, kv_}}, {"kv1", {tokens_, kv_}},
             {"dkv0", {tokens_, kv_}}, {"dkv1", {tokens_, kv_}}, {"dkvr", {tokens_, kv_}}, {"rsc0", {sp_, h}}, {"rsc1", {sp_, h}}, {"rsr", {sp_, h}}})
      buffer(name, shape, name == "loss" ? "f32" : o.fp8 && fp8_operand(name) ? "f8e4m3" : o.dtype);
    for (const char* c : {"cnt_mb", "cnt_l"}) buffer(c, {}, "s32");
    for (const char* c : {"go_mb", "go_l"}) buffer(c, {}, "bool");
    buffers_["stage"] = {{"shape", ojson::array()}, {"dtype", "s32"}, {"role", "input"}, {"init", {{"kind", "axis_index"}, {"axis", "pp"}}}};
    shards_ = l_.dp * o.cp;
    // Gradients and parameters are sharded over dp x cp (the distributed
    // optimizer). Gradient buckets (layers whose parameters reach the bucket size),
    // reduce-scattered over dp as the last backward finishes them.
    const double per_layer = layer_params(m_) / static_cast<double>(t);
    bucket_layers_ = std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(o.bucket_params) / per_layer), 1, l_.layers_per_stage);
    buckets_ = (l_.layers_per_stage + bucket_layers_ - 1) / bucket_layers_;
    const int64_t bucket = (static_cast<int64_t>(per_layer) * bucket_layers_ + shards_ - 1) / shards_ * shards_;
    if (shards_ > 1)
      for (int64_t k = 0; k < buckets_; ++k) {
        buffer("grad" + std::to_string(k), {bucket}, o.dtype);
        buffer("gshard" + std::to_string(k), {bucket / shards_}, o.dtype);
        buffer("param" + std::to_string(k), {bucket}, o.dtype);
      }
    buffer("opt", {std::max<int64_t>(1, static_cast<int64_t>(per_layer) * l_.layers_per_stage / shards_)}, "f32");
  }

  ojson schedule() {
    ojson s;
    s["format"] = "thunky.sched/1";
    s["name"] = m_.name + "_tp" + std::to_string(o_.tp) + "_pp" + std::to_string(o_.pp) + "_dp" + std::to_string(l_.dp);
    s["description"] = "One training step of " + m_.name + " on " + std::to_string(o_.gpus) + " GPUs as Megatron-Core issues it: tp " + std::to_string(o_.tp) +
                       " with sequence parallelism, a 1F1B pipeline of " + std::to_string(o_.pp) + " stages over " + std::to_string(l_.micro_batches) +
                       " micro-batches of " + std::to_string(o_.micro_batch) + " x " + std::to_string(l_.seq) + " tokens, dp " + std::to_string(l_.dp) +
                       " with the distributed optimizer, recompute " + o_.recompute + " (thunky-gen transformer)";
    s["mesh"] = {{"axis_names", {"pp", "dp", "cp", "tp"}}, {"shape", {o_.pp, l_.dp, o_.cp, o_.tp}}};
    ojson program = ojson::array();
    if (o_.pp == 1) {
      program = stage(0);
    } else {
      ojson branches = ojson::array();
      for (int64_t s = 0; s < o_.pp; ++s) branches.push_back(stage(s));
      program.push_back({{"op", "switch"}, {"name", "pipeline stage"}, {"index", "stage"}, {"branches", branches}});
    }
    s["buffers"] = buffers_;
    s["program"] = program;
    return s;
  }

 private:
  // FP8 (Transformer Engine's recipe): the layers' GEMMs take e4m3
  // operands, the weights cast once a step and each activation cast by the
  // kernel or collective that makes it (TE fuses the cast into the norm,
  // the activation and the attention); their outputs, the attention, the
  // logits and everything between stages stay in the training dtype.
  static bool fp8_operand(const std::string& name) {
    for (const char* n : {"ln", "xf", "ctx", "h2", "dy", "dyf", "dh1", "dqkv", "w_qkv", "w_o", "w_1", "w_2"})
      if (name == n) return true;
    return false;
  }
  void buffer(const std::string& name, std::vector<int64_t> shape, const std::string& dtype) {
    buffers_[name] = {{"shape", shape}, {"dtype", dtype}};
  }
  double bytes(int64_t elements) const { return static_cast<double>(elements) * (o_.dtype == "f32" ? 4.0 : 2.0); }

  // Commands, each named for the report: "tp ..." / "pp ..." / "dp ..."
  // collectives say which parallelism they serve.
  static ojson gemm(const std::string& name, const std::string& a, const std::string& b, const std::string& c, bool ta = false, bool tb = false) {
    ojson g = {{"op", "gemm"}, {"name", name}, {"a", a}, {"b", b}, {"c", c}};
    if (ta) g["transpose_a"] = true;
    if (tb) g["transpose_b"] = true;
    return g;
  }
  static ojson kernel(const std::string& name, std::vector<std::string> reads, std::vector<std::string> writes, double flops, double bytes) {
    return {{"op", "kernel"}, {"name", name}, {"reads", reads}, {"writes", writes}, {"cost", {{"flops", flops}, {"bytes", bytes}}}};
  }
  void tp(ojson& p, const std::string& op, const std::string& name, const std::string& src, const std::string& dst) const {
    if (o_.tp > 1) p.push_back({{"op", op}, {"name", "tp " + name}, {"src", src}, {"dst", dst}, {"axis", "tp"}});
  }
  // What the distributed optimizer shards over: dp, and cp where there is one.
  ojson shard_axes() const { return o_.cp > 1 ? ojson{"dp", "cp"} : ojson("dp"); }
  // The layer norm's output, gathered over tp for the column-parallel GEMMs.
  std::string gathered() const { return o_.tp > 1 ? "xf" : "ln"; }

  double attention_flops() const {
    // FlashAttention, causal: QK^T and AV over half the s x s scores, a
    // tp shard of the heads.
    return 2.0 * static_cast<double>(o_.micro_batch) * static_cast<double>(l_.seq) * static_cast<double>(l_.seq) *
           static_cast<double>(m_.hidden) / static_cast<double>(o_.tp * o_.cp);
  }

  // Attention over the rank's queries (and, backward, their gradients).
  // With context parallelism, ring attention: cp blocks, each against the
  // keys and values of one rank of the cp ring, the next block's arriving
  // (a shift over cp, on its own stream) while this one computes; backward,
  // the key and value gradients travel the ring beside them. Causal, with
  // the sequence in 2 cp chunks two a rank (Megatron's balance), each block
  // is 1/cp of the rank's work.
  void attention(ojson& p, bool backward, const std::string& what = "") const {
    const int64_t h = m_.hidden, cp = o_.cp;
    // FlashAttention's backward recomputes the scores: 2.5 times the forward's flops.
    const double flops = (backward ? 2.5 : 1.0) * attention_flops() / static_cast<double>(cp);
    const double moved = bytes(tokens_ * ((backward ? 3 : 1) * qkv_ + h / o_.tp)) / static_cast<double>(cp);
    const std::string name = std::string(backward ? "attention backward" : "attention") + what;
    const std::vector<std::string> reads = backward ? std::vector<std::string>{"dctx", "qkv"} : std::vector<std::string>{"qkv"};
    const std::string out = backward ? "dqkv" : "ctx";
    if (cp == 1) {
      p.push_back(kernel(name, reads, {out}, flops, moved));
      return;
    }
    for (int64_t i = 0; i < cp; ++i) {
      const std::string kv = "kv" + std::to_string(i % 2), next = "kv" + std::to_string((i + 1) % 2);
      // The previous block's key-value gradients (in the buffer this block
      // does not write) go on round the ring as the next keys come.
      const std::string previous = "dkv" + std::to_string((i + 1) % 2);
      const bool more = i + 1 < cp;
      if (more) {
        ojson ring = ojson::array();
        ring.push_back({{"op", "collective_permute"}, {"name", "cp key-value ring"}, {"src", kv}, {"dst", next}, {"axis", "cp"}, {"shift", 1}});
        if (backward && i > 0)
          ring.push_back({{"op", "collective_permute"}, {"name", "cp key-value gradient ring"}, {"src", previous}, {"dst", "dkvr"}, {"axis", "cp"}, {"shift", 1}});
        p.push_back({{"op", "async_start"}, {"token", "cp"}, {"stream", {{"kind", "communication"}, {"id", 3}}},
                     {"body", ring.size() == 1 ? ring : ojson::array({{{"op", "collective_group"}, {"body", ring}}})}});
      }
      std::vector<std::string> r = reads;
      r.push_back(kv);
      std::vector<std::string> w = {out};
      if (backward) w.push_back(i % 2 ? "dkv1" : "dkv0");
      p.push_back(kernel(name + " block", r, w, flops, moved));
      if (more) p.push_back({{"op", "async_done"}, {"token", "cp"}});
    }
    // The last block's key-value gradients go home.
    if (backward)
      p.push_back({{"op", "collective_permute"}, {"name", "cp key-value gradient ring"}, {"src", "dkv" + std::to_string((cp - 1) % 2)}, {"dst", "dkvr"}, {"axis", "cp"}, {"shift", 1}});
  }

  // Rows [i sp, (i + 1) sp) of a buffer of the gathered sequence.
  std::string rows(const std::string& buffer, int64_t i) const { return buffer + "[" + std::to_string(i * sp_) + ":" + std::to_string((i + 1) * sp_) + "]"; }
  bool overlap() const { return o_.tp_comm_overlap && o_.tp > 1; }

  // A column-parallel GEMM on the sequence all-gathered over tp. With
  // --tp-comm-overlap, as Transformer Engine's userbuffers run it: a ring
  // of tp chunks, each chunk's GEMM beside the next chunk's shift (on tp's
  // own stream, communication 4), the chunks landing in the gathered
  // buffer (in ring order: the timing's, not the data's placement).
  void gathered_gemm(ojson& p, const std::string& name, const std::string& what, const std::string& local, const std::string& full, const std::string& b,
                     const std::string& c, bool tb) const {
    if (!overlap()) {
      tp(p, "all_gather", what, local, full);
      p.push_back(gemm(name, o_.tp > 1 ? full : local, b, c, false, tb));
      return;
    }
    for (int64_t i = 0; i < o_.tp; ++i) {
      const std::string chunk = i == 0 ? local : rows(full, i);
      const bool more = i + 1 < o_.tp;
      if (more)
        p.push_back({{"op", "async_start"}, {"token", "tp"}, {"stream", {{"kind", "communication"}, {"id", 4}}},
                     {"body", {{{"op", "collective_permute"}, {"name", "tp " + what + " (ring chunk)"}, {"src", chunk}, {"dst", rows(full, i + 1)}, {"axis", "tp"}, {"shift", 1}}}}});
      p.push_back(gemm(name + " chunk", chunk, b, rows(c, i), false, tb));
      if (more) p.push_back({{"op", "async_done"}, {"token", "tp"}});
    }
  }

  // A row-parallel GEMM whose partial sums are reduce-scattered over tp.
  // With --tp-comm-overlap, a ring: each chunk of rows' GEMM, the partial
  // sum arriving from the previous rank added to it, then passed on while
  // the next chunk's GEMM runs.
  void scattered_gemm(ojson& p, const std::string& name, const std::string& what, const std::string& a, const std::string& b, const std::string& partial,
                      const std::string& out, bool tb) const {
    if (!overlap()) {
      p.push_back(gemm(name, a, b, o_.tp > 1 ? partial : out, false, tb));
      tp(p, "reduce_scatter", what, partial, out);
      return;
    }
    const int64_t h = m_.hidden;
    for (int64_t i = 0; i < o_.tp; ++i) {
      const std::string mine = "rsc" + std::to_string(i % 2);
      p.push_back(gemm(name + " chunk", rows(a, i), b, mine, false, tb));
      if (i > 0) {
        p.push_back({{"op", "async_done"}, {"token", "tp"}});
        p.push_back(kernel("add the partial sum", {mine, "rsr"}, {i + 1 == o_.tp ? out : mine}, sp_ * h, bytes(3 * sp_ * h)));
      }
      if (i + 1 < o_.tp)
        p.push_back({{"op", "async_start"}, {"token", "tp"}, {"stream", {{"kind", "communication"}, {"id", 4}}},
                     {"body", {{{"op", "collective_permute"}, {"name", "tp " + what + " (ring chunk)"}, {"src", mine}, {"dst", "rsr"}, {"axis", "tp"}, {"shift", -1}}}}});
    }
  }

  void layer_forward(ojson& p) const {
    const int64_t h = m_.hidden;
    p.push_back(kernel("layernorm 1", {"x"}, {"ln"}, 8.0 * sp_ * h, bytes(2 * sp_ * h)));
    gathered_gemm(p, "QKV", "all-gather before QKV", "ln", "xf", "w_qkv", "qkv", false);
    attention(p, false);
    scattered_gemm(p, "attention projection", "reduce-scatter after projection", "ctx", "w_o", "yf", "y", false);
    p.push_back(kernel("dropout, residual, layernorm 2", {"y", "x"}, {"ln"}, 12.0 * sp_ * h, bytes(4 * sp_ * h)));
    gathered_gemm(p, "MLP up", "all-gather before MLP", "ln", "xf", "w_1", "h1", false);
    p.push_back(kernel(m_.swiglu ? "SwiGLU" : "GELU", {"h1"}, {"h2"}, 10.0 * tokens_ * ffn_, bytes(tokens_ * (up_ + ffn_))));
    scattered_gemm(p, "MLP down", "reduce-scatter after MLP", "h2", "w_2", "yf", "y", false);
    p.push_back(kernel("dropout, residual", {"y"}, {"x"}, 4.0 * sp_ * h, bytes(3 * sp_ * h)));
  }

  void layer_backward(ojson& p) const {
    const int64_t h = m_.hidden;
    if (o_.recompute == "full") layer_forward(p);
    const std::string dyf = o_.tp > 1 ? "dyf" : "dy", dxf = o_.tp > 1 ? "dxf" : "dls";
    p.push_back(kernel("dropout, residual backward", {"dx"}, {"dy"}, 4.0 * sp_ * h, bytes(3 * sp_ * h)));
    gathered_gemm(p, "MLP down dgrad", "all-gather of MLP output grad", "dy", "dyf", "w_2", "dh2", true);
    p.push_back(gemm("MLP down wgrad", "h2", dyf, "dw_2", true));
    p.push_back(kernel(m_.swiglu ? "SwiGLU backward" : "GELU backward", {"dh2", "h1"}, {"dh1"}, 12.0 * tokens_ * ffn_, bytes(tokens_ * (2 * up_ + ffn_))));
    // The input gradient's GEMM and its reduce-scatter, and the wgrad on
    // the re-gathered norm output: overlapped, the reduce-scatter rides
    // the dgrad's chunks and the wgrad follows.
    auto input_grad = [&](const std::string& name, const std::string& what, const std::string& a, const std::string& w, const std::string& wgrad,
                          const std::string& gather, const std::string& dw) {
      if (overlap()) {
        scattered_gemm(p, name, what, a, w, "dxf", "dls", true);
        tp(p, "all_gather", gather, "ln", "xf");
        p.push_back(gemm(wgrad, gathered(), a, dw, true));
        return;
      }
      p.push_back(gemm(name, a, w, dxf, false, true));
      tp(p, "all_gather", gather, "ln", "xf");
      p.push_back(gemm(wgrad, gathered(), a, dw, true));
      tp(p, "reduce_scatter", what, "dxf", "dls");
    };
    input_grad("MLP up dgrad", "reduce-scatter of MLP input grad", "dh1", "w_1", "MLP up wgrad", "all-gather before MLP up wgrad", "dw_1");
    p.push_back(kernel("layernorm 2 backward, residual", {"dls", "dy"}, {"dy"}, 12.0 * sp_ * h, bytes(4 * sp_ * h)));
    gathered_gemm(p, "attention projection dgrad", "all-gather of projection grad", "dy", "dyf", "w_o", "dctx", true);
    p.push_back(gemm("attention projection wgrad", "ctx", dyf, "dw_o", true));
    if (o_.recompute == "selective") attention(p, false, " (recomputed)");
    attention(p, true);
    input_grad("QKV dgrad", "reduce-scatter of QKV input grad", "dqkv", "w_qkv", "QKV wgrad", "all-gather before QKV wgrad", "dw_qkv");
    p.push_back(kernel("layernorm 1 backward, residual", {"dls", "dy"}, {"dx"}, 12.0 * sp_ * h, bytes(4 * sp_ * h)));
  }

  // A loop of `trips` over `body`, counted on device by a counter of zero
  // cost (the host's loop: no device time), with the trip count as a sim
  // hint. Trips of 1 are the body itself, 0 nothing.
  static void loop(ojson& p, const std::string& level, int64_t trips, const ojson& body) {
    if (trips <= 0) return;
    if (trips == 1) {
      for (const auto& c : body) p.push_back(c);
      return;
    }
    const std::string cnt = "cnt_" + level, go = "go_" + level;
    const ojson free = {{"seconds", 0}};
    p.push_back({{"op", "memset"}, {"name", "host loop"}, {"dst", cnt}, {"value", 0}, {"cost", free}});
    ojson b = body;
    b.push_back({{"op", "map"}, {"name", "host loop"}, {"out", cnt}, {"expr", "c + 1"}, {"in", {{"c", cnt}}}, {"cost", free}});
    p.push_back({{"op", "while"}, {"name", level == "l" ? "layers" : "micro-batches"}, {"cond_buf", go},
                 {"cond", {{{"op", "map"}, {"name", "host loop"}, {"out", go}, {"expr", "c < " + std::to_string(trips)}, {"in", {{"c", cnt}}}, {"cost", free}}}},
                 {"body", b}, {"sim", {{"trip_count", trips}}}});
  }

  // A stage's forward of one micro-batch; `first` waits for each bucket's
  // parameters (all-gathered over dp at the step's start).
  ojson forward(int64_t s, bool first) const {
    ojson p = ojson::array();
    const int64_t h = m_.hidden;
    if (s == 0) {
      p.push_back(kernel("embedding", {"w_out"}, {o_.tp > 1 ? "xo" : "x"}, 0, bytes(2 * tokens_ * h)));
      tp(p, "reduce_scatter", "reduce-scatter of the embedding", "xo", "x");
    }
    ojson layer = ojson::array();
    layer_forward(layer);
    if (first && shards_ > 1) {
      for (int64_t k = 0; k < buckets_; ++k) {
        p.push_back({{"op", "async_done"}, {"token", "param" + std::to_string(k)}});
        loop(p, "l", std::min(bucket_layers_, l_.layers_per_stage - k * bucket_layers_), layer);
      }
    } else {
      loop(p, "l", l_.layers_per_stage, layer);
    }
    if (s == o_.pp - 1) {
      tp(p, "all_gather", "all-gather before the logits", "x", "xo");
      p.push_back(gemm("logits", o_.tp > 1 ? "xo" : "x", "w_out", "logits"));
      p.push_back(kernel("cross-entropy", {"logits"}, {"loss"}, 6.0 * tokens_ * m_.vocab / o_.tp, bytes(tokens_ * m_.vocab / o_.tp)));
      if (o_.tp > 1) p.push_back({{"op", "all_reduce"}, {"name", "tp cross-entropy max and sum"}, {"src", "loss"}, {"dst", "loss"}, {"axis", "tp"}});
    }
    return p;
  }

  // A stage's backward of one micro-batch; `last` reduce-scatters each
  // bucket's gradients over dp as soon as its layers are done.
  ojson backward(int64_t s, bool last) const {
    ojson p = ojson::array();
    const int64_t h = m_.hidden;
    if (s == o_.pp - 1) {
      p.push_back(kernel("cross-entropy backward", {"logits"}, {"logits"}, 4.0 * tokens_ * m_.vocab / o_.tp, bytes(2 * tokens_ * m_.vocab / o_.tp)));
      p.push_back(gemm("logits dgrad", "logits", "w_out", o_.tp > 1 ? "dxf" : "dx", false, true));
      p.push_back(gemm("logits wgrad", o_.tp > 1 ? "xo" : "x", "logits", "dw_out", true));
      tp(p, "reduce_scatter", "reduce-scatter of the logits' input grad", "dxf", "dx");
    }
    ojson layer = ojson::array();
    layer_backward(layer);
    if (last && shards_ > 1) {
      for (int64_t k = 0; k < buckets_; ++k) {
        const std::string g = "grad" + std::to_string(k);
        loop(p, "l", std::min(bucket_layers_, l_.layers_per_stage - k * bucket_layers_), layer);
        p.push_back({{"op", "kernel"}, {"name", "gradient bucket"}, {"reads", {"dw_qkv", "dw_o", "dw_1", "dw_2"}}, {"writes", {g}}, {"cost", {{"seconds", 0}}}});
        p.push_back({{"op", "async_start"}, {"token", g}, {"stream", {{"kind", "communication"}, {"id", 1}}},
                     {"body", {{{"op", "reduce_scatter"}, {"name", "dp gradient reduce-scatter"}, {"src", g}, {"dst", "gshard" + std::to_string(k)}, {"axis", shard_axes()}}}}});
      }
    } else {
      loop(p, "l", l_.layers_per_stage, layer);
    }
    if (s == 0) {
      tp(p, "all_gather", "all-gather of the embedding grad", "dx", "dxf");
      p.push_back(kernel("embedding backward", {o_.tp > 1 ? "dxf" : "dx"}, {"dw_out"}, 0, bytes(2 * tokens_ * h)));
    }
    return p;
  }

  // A send or exchange between stages s and s + 1 (`dir` +1 forward, -1
  // backward, 0 both ways), on the pipeline's stream. Each neighbour pair
  // is its own communicator: groups of the combined (pp, dp, cp, tp) index
  // pair each rank of stage s with its peer in s + 1 (the other stages'
  // ranks in groups of their own, which never launch it).
  ojson p2p(int64_t s, int dir, const std::string& src, const std::string& dst) const {
    // With an even number of stages, groups of the pp axis alone pair them
    // (s with s + 1, the others two by two); with an odd one, the combined
    // index pairs the odd stage out's ranks among themselves.
    const bool by_stage = o_.pp % 2 == 0;
    const int64_t inner = by_stage ? 1 : l_.dp * o_.cp * o_.tp, n = o_.pp * inner;
    ojson groups = ojson::array();
    std::vector<int64_t> rest;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t stage = k / inner;
      if (stage == s) groups.push_back({k, k + inner});
      else if (stage != s + 1) rest.push_back(k);
    }
    // The others: stage with stage, rank for rank, where they pair up; an
    // odd stage out pairs its ranks among themselves.
    std::vector<int64_t> stages;
    for (int64_t k = 0; k < o_.pp; ++k)
      if (k != s && k != s + 1) stages.push_back(k);
    size_t i = 0;
    for (; i + 1 < stages.size(); i += 2)
      for (int64_t r = 0; r < inner; ++r) groups.push_back({stages[i] * inner + r, stages[i + 1] * inner + r});
    if (i < stages.size()) {
      if (inner % 2 != 0) throw std::invalid_argument("an odd number of stages with an odd dp x cp x tp cannot pair the ranks of its sends");
      for (int64_t r = 0; r < inner / 2; ++r) groups.push_back({stages[i] * inner + r, stages[i] * inner + r + inner / 2});
    }
    const ojson pairs = dir > 0 ? ojson{{0, 1}} : dir < 0 ? ojson{{1, 0}} : ojson{{0, 1}, {1, 0}};
    const std::string what = dir > 0 ? "pp send forward" : dir < 0 ? "pp send backward" : "pp exchange";
    const std::string token = "p2p";
    return ojson{{{"op", "async_start"}, {"token", token}, {"stream", {{"kind", "communication"}, {"id", 0}}},
                  {"body", {{{"op", "collective_permute"}, {"name", what + " " + std::to_string(s) + "-" + std::to_string(s + 1)}, {"src", src}, {"dst", dst},
                             {"axis", by_stage ? ojson("pp") : ojson{"pp", "dp", "cp", "tp"}}, {"pairs", pairs}, {"groups", groups}}}}},
                 {{"op", "async_done"}, {"token", token}}};
  }
  // Appends stage s's side of a p2p with its previous (prev) or next stage.
  // What a stage receives lands in xin (activations) or dxin (gradients),
  // and is the layers' input from there (no device time: Megatron
  // receives into the tensor the layer reads).
  static ojson land(const std::string& from, const std::string& to) {
    return {{"op", "kernel"}, {"name", "received"}, {"reads", {from}}, {"writes", {to}}, {"cost", {{"seconds", 0}}}};
  }
  void recv_forward(ojson& p, int64_t s) const {
    if (s == 0) return;
    append(p, p2p(s - 1, +1, "x", "xin"));
    p.push_back(land("xin", "x"));
  }
  void send_forward(ojson& p, int64_t s) const {
    if (s < o_.pp - 1) append(p, p2p(s, +1, "x", "xin"));
  }
  void recv_backward(ojson& p, int64_t s) const {
    if (s == o_.pp - 1) return;
    append(p, p2p(s, -1, "dx", "dxin"));
    p.push_back(land("dxin", "dx"));
  }
  void send_backward(ojson& p, int64_t s) const {
    if (s > 0) append(p, p2p(s - 1, -1, "dx", "dxin"));
  }
  static void append(ojson& p, const ojson& more) {
    for (const auto& c : more) p.push_back(c);
  }

  // Stage s's step: 1F1B as Megatron-Core's forward_backward_pipelining_
  // without_interleaving runs it (warmup forwards, one forward and one
  // backward at a time, cooldown backwards), between the dp parameter
  // all-gather and the optimizer.
  ojson stage(int64_t s) const {
    ojson p = ojson::array();
    if (o_.fp8) {
      // The stage's weights cast to FP8 once a step (read 2 bytes, write 1).
      const double params = layer_params(m_) * static_cast<double>(l_.layers_per_stage) / static_cast<double>(o_.tp);
      p.push_back(kernel("cast weights to FP8", {"opt"}, {"w_qkv", "w_o", "w_1", "w_2"}, params, 3.0 * params));
    }
    const int64_t m = l_.micro_batches, warm = std::min(o_.pp - s - 1, m), steady = m - warm;
    if (shards_ > 1)
      for (int64_t k = 0; k < buckets_; ++k)
        p.push_back({{"op", "async_start"}, {"token", "param" + std::to_string(k)}, {"stream", {{"kind", "communication"}, {"id", 2}}},
                     {"body", {{{"op", "all_gather"}, {"name", "dp parameter all-gather"}, {"src", "gshard" + std::to_string(k)}, {"dst", "param" + std::to_string(k)}, {"axis", shard_axes()}}}}});
    // Warmup: the first forward on its own (it waits for the parameters), the rest in a loop.
    auto warm_one = [&](bool first) {
      ojson b = ojson::array();
      recv_forward(b, s);
      append(b, forward(s, first));
      send_forward(b, s);
      return b;
    };
    if (warm > 0) {
      append(p, warm_one(true));
      loop(p, "mb", warm - 1, warm_one(false));
    }
    if (steady > 0) recv_forward(p, s);
    // Steady: forward, exchange with the next stage (send forward, receive
    // backward), backward, exchange with the previous (send backward,
    // receive forward); the last sends backward only.
    auto steady_one = [&](bool first, bool last_iteration, bool last_backward) {
      ojson b = ojson::array();
      append(b, forward(s, first));
      if (s < o_.pp - 1) {
        append(b, p2p(s, 0, "x", "dxin"));
        b.push_back(land("dxin", "dx"));
      }
      append(b, backward(s, last_backward));
      if (last_iteration) {
        send_backward(b, s);
      } else if (s > 0) {
        append(b, p2p(s - 1, 0, "dx", "xin"));
        b.push_back(land("xin", "x"));
      }
      return b;
    };
    for (int64_t i = 0; i < steady;) {
      const bool first = warm == 0 && i == 0, last = i == steady - 1;
      if (first || last) {
        append(p, steady_one(first, last, last && warm == 0));
        ++i;
        continue;
      }
      const int64_t run = steady - 1 - i;  // up to the last, which is unrolled
      loop(p, "mb", run, steady_one(false, false, false));
      i += run;
    }
    // Cooldown: the remaining backwards, the last reduce-scattering gradients.
    auto cool_one = [&](bool last) {
      ojson b = ojson::array();
      recv_backward(b, s);
      append(b, backward(s, last));
      send_backward(b, s);
      return b;
    };
    if (warm > 0) {
      loop(p, "mb", warm - 1, cool_one(false));
      append(p, cool_one(true));
    }
    if (shards_ > 1)
      for (int64_t k = 0; k < buckets_; ++k) p.push_back({{"op", "async_done"}, {"token", "grad" + std::to_string(k)}});
    // Adam on the rank's shard: reads the gradient (4 bytes), the fp32
    // master weights, m and v (12), writes them (12) and the bf16 weights (2).
    const double shard = layer_params(m_) * static_cast<double>(l_.layers_per_stage) / static_cast<double>(o_.tp * shards_);
    p.push_back(kernel("optimizer", {"opt"}, {"opt"}, 12.0 * shard, 30.0 * shard));
    return p;
  }

  const TransformerOptions& o_;
  TransformerLayout l_;
  const TransformerModel& m_;
  int64_t tokens_ = 0, sp_ = 0, qkv_ = 0, kv_ = 0, up_ = 0, ffn_ = 0;
  int64_t bucket_layers_ = 1, buckets_ = 1, shards_ = 1;
  ojson buffers_ = ojson::object();
};

}  // namespace

ojson transformer(const TransformerOptions& o) { return Step(o).schedule(); }

}  // namespace thunky::gen

#include "core/load.h"
#include "sim/engine.h"

namespace thunky::gen {

namespace {

// The length of the union of intervals.
double covered(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, end = -1e300;
  for (auto [a, b] : v) {
    if (b <= end) continue;
    total += b - std::max(a, end);
    end = b;
  }
  return total;
}

}  // namespace

StepPrediction predict_step(const TransformerOptions& o, const sim::Machine& m) {
  const TransformerLayout l = transformer_layout(o);
  StepPrediction r;
  r.memory = transformer_memory(o);
  if (m.hbm_bytes > 0 && r.memory.total() > m.hbm_bytes)
    throw std::invalid_argument("each GPU would hold " + std::to_string(static_cast<int64_t>(r.memory.total() / 1e9)) + " GB (weights " +
                                std::to_string(static_cast<int64_t>(r.memory.weights / 1e9)) + ", gradients " + std::to_string(static_cast<int64_t>(r.memory.gradients / 1e9)) +
                                ", optimizer " + std::to_string(static_cast<int64_t>(r.memory.optimizer / 1e9)) + ", activations " +
                                std::to_string(static_cast<int64_t>(r.memory.activations / 1e9)) + "), past the " + std::to_string(static_cast<int64_t>(m.hbm_bytes / 1e9)) +
                                " GB of " + m.name);
  auto p = load_schedule_text(transformer(o).dump(), "transformer.json");
  if (!p) throw std::runtime_error(p.errors().front().str());
  auto sim = sim::simulate(*p, m, nullptr);
  if (!sim) throw std::runtime_error(sim.errors().front().str());
  const Report& rep = sim->report;
  r.classes = sim->classes.count();
  r.step_s = rep.makespan_s;
  const double tokens = static_cast<double>(l.micro_batches * o.micro_batch * l.dp * l.seq);
  r.tokens_per_s_per_gpu = tokens / r.step_s / static_cast<double>(o.gpus);
  r.model_tflops_per_gpu = transformer_model_flops(o) / r.step_s / static_cast<double>(o.gpus) / 1e12;
  const auto dtype = parse_dtype(o.dtype);
  r.mfu = r.model_tflops_per_gpu * 1e12 / m.peak(dtype ? *dtype : DType::bf16);
  // Stage 0's timeline (rank 0).
  const RankReport& rank = rep.timeline(rep.ranks.front());
  std::vector<std::pair<double, double>> compute, all, tp, cp, pp, dp;
  for (const OpRecord& op : rank.ops) {
    const std::string name = op.name.str(), kind = op.op.str();
    const bool collective = kind == "all_reduce" || kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all" || kind == "collective_permute";
    if (!collective) {
      if (name == "optimizer") r.optimizer_s += op.end_s - op.start_s;
      else compute.push_back({op.start_s, op.end_s});
      all.push_back({op.start_s, op.end_s});
      continue;
    }
    const std::pair<double, double> moving{op.transfer_start(), op.end_s};
    all.push_back(moving);
    (name.rfind("tp ", 0) == 0 ? tp : name.rfind("cp ", 0) == 0 ? cp : name.rfind("pp ", 0) == 0 ? pp : dp).push_back(moving);
  }
  r.compute_s = covered(compute);
  // Each kind's transfer outside compute (and outside the kinds before it).
  auto exposed = [&](std::vector<std::pair<double, double>>& kind) {
    const double before = covered(compute);
    for (const auto& x : kind) compute.push_back(x);
    return covered(compute) - before;
  };
  r.tp_s = exposed(tp);
  r.cp_s = exposed(cp);
  r.pp_s = exposed(pp);
  r.dp_s = exposed(dp);
  r.bubble_s = std::max(0.0, r.step_s - covered(all));
  return r;
}

}  // namespace thunky::gen
