// Hand-built reports for the traces tests.
#pragma once

#include <algorithm>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "traces/report.h"

namespace thunky::testing {

// A report of one rank per entry of `ranks`, on mesh x, summarized.
inline Report report(const std::string& source, std::vector<std::vector<OpRecord>> ranks) {
  Report r;
  r.source = source;
  r.schedule = std::string(1, 's');  // (GCC 12 warns falsely on assigning a one-character literal here)
  r.axis_names.push_back("x");
  r.mesh_shape = {static_cast<int64_t>(ranks.size())};
  for (size_t k = 0; k < ranks.size(); ++k) {
    RankReport rr;
    rr.rank = static_cast<int64_t>(k);
    rr.coords = {static_cast<int64_t>(k)};
    rr.ops = std::move(ranks[k]);
    r.ranks.push_back(std::move(rr));
  }
  summarize(r);
  return r;
}

// An op on computation:0 when it is a GEMM, else on communication:0.
inline OpRecord op(const std::string& id, const std::string& kind, double start, double end) {
  OpRecord o;
  o.id = id;
  o.op = kind;
  o.stream = kind == "gemm" ? "computation:0" : "communication:0";
  o.start_s = start;
  o.end_s = end;
  return o;
}

// Whether a line of `text` (a printed table) holds `fields` one after
// another, however its columns are spaced.
inline bool has_row(const std::string& text, const std::vector<std::string>& fields) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    const std::vector<std::string> row{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    if (std::search(row.begin(), row.end(), fields.begin(), fields.end()) != row.end()) return true;
  }
  return false;
}

}  // namespace thunky::testing
