#include "core/ops/collective.h"

#include "core/ops/op_io.h"
#include "core/schedule.h"

namespace thunky {

CollectiveGroup CollectiveGroup::read(OpReader& r) { return CollectiveGroup{.body = r.block("body")}; }
void CollectiveGroup::write(json& j) const { j["body"] = block_json(body); }

}  // namespace thunky
