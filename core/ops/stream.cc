#include "core/ops/stream.h"

#include "core/ops/op_io.h"
#include "core/schedule.h"

namespace thunky {

AsyncStart AsyncStart::read(OpReader& r) {
  AsyncStart a;
  a.token = r.str("token");
  a.stream = r.stream("stream");
  a.body = r.block("body");
  return a;
}
void AsyncStart::write(json& j) const {
  j["token"] = token;
  j["stream"] = stream_json(stream);
  j["body"] = block_json(body);
}

AsyncDone AsyncDone::read(OpReader& r) { return AsyncDone{.token = r.str("token")}; }
void AsyncDone::write(json& j) const { j["token"] = token; }

}  // namespace thunky
