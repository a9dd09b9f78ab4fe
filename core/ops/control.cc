#include "core/ops/control.h"

#include "core/ops/op_io.h"
#include "core/schedule.h"

namespace thunky {

Cond Cond::read(OpReader& r) {
  Cond c;
  c.pred = r.ref("pred");
  c.then_ = r.block("then");
  c.else_ = r.block("else", false);
  c.taken = r.sim_flag("taken");
  return c;
}
void Cond::write(json& j) const {
  j["pred"] = ref_json(pred);
  j["then"] = block_json(then_);
  j["else"] = block_json(else_);
  if (taken) j["sim"] = {{"taken", *taken}};
}

Switch Switch::read(OpReader& r) {
  Switch s;
  s.index = r.ref("index");
  s.branches = r.blocks("branches");
  s.branch = r.sim_count("branch");
  return s;
}
void Switch::write(json& j) const {
  j["index"] = ref_json(index);
  json br = json::array();
  for (const auto& b : branches) br.push_back(block_json(b));
  j["branches"] = br;
  if (branch) j["sim"] = {{"branch", *branch}};
}

While While::read(OpReader& r) {
  While w;
  w.cond_buf = r.ref("cond_buf");
  w.cond = r.block("cond");
  w.body = r.block("body");
  w.trip_count = r.sim_count("trip_count");
  return w;
}
void While::write(json& j) const {
  j["cond_buf"] = ref_json(cond_buf);
  j["cond"] = block_json(cond);
  j["body"] = block_json(body);
  if (trip_count) j["sim"] = {{"trip_count", *trip_count}};
}

Call Call::read(OpReader& r) {
  Call c;
  c.fn = r.str("fn");
  c.args = r.named_refs("args");
  return c;
}
void Call::write(json& j) const {
  j["fn"] = fn;
  j["args"] = named_refs_json(args);
}

}  // namespace thunky
