// thunky-calibrate exec --backend cpu|cuda: micro-benchmarks run on a
// backend (GEMMs over shapes and dtypes, copies and memsets over sizes,
// maps, tiny commands for the launch overhead, a collective between ranks,
// and a GEMM beside a copy on two streams), fitted into a machine model of
// the machine they ran on.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace thunky::calibrate {

// `progress` is told each benchmark as it starts ("gemm f32 512^3").
// `ranks` is how many ranks the collective benchmarks use (and how many
// ranks the model is meant for: on the cpu backend they share the host).
// `quick`: one shape and one size of each benchmark, small (for tests).
Expected<nlohmann::ordered_json> calibrate_backend(const std::string& backend, int ranks, bool quick, const std::function<void(const std::string&)>& progress);

}  // namespace thunky::calibrate
