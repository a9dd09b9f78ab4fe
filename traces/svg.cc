#include "traces/svg.h"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace thunky {

namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

const char* colour(const std::string& op) {
  if (op == "gemm") return "#4e79a7";
  if (is_collective_op(op)) return "#f28e2b";
  if (op == "map" || op == "reduce") return "#59a14f";
  if (op == "copy" || op == "memset" || op == "memzero") return "#9c9c9c";
  if (op == "kernel" || op == "ptx_kernel" || op == "custom_call") return "#b07aa1";
  return "#76b7b2";
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

}  // namespace

std::string timeline_svg(const Report& r) {
  const double left = 210, width = 1000, lane = 18, gap = 10, top = 40;
  const double span = r.makespan_s > 0 ? r.makespan_s : 1e-9;
  auto x = [&](double t) { return left + width * t / span; };
  // Lanes: per rank, its streams in first-use order, computation:0 first.
  std::map<int64_t, std::vector<std::string>> lanes;
  for (const auto& rank : r.ranks) {
    auto& v = lanes[rank.rank];
    v.push_back("computation:0");
    std::set<std::string> seen{"computation:0"};
    for (const auto& op : rank.ops)
      if (seen.insert(op.stream).second) v.push_back(op.stream);
    for (const auto& f : rank.flows)
      for (const auto* s : {&f.from_stream, &f.to_stream})
        if (seen.insert(*s).second) v.push_back(*s);
  }
  std::map<std::pair<int64_t, std::string>, double> lane_y;
  double y = top;
  for (const auto& rank : r.ranks) {
    for (const auto& s : lanes[rank.rank]) {
      lane_y[{rank.rank, s}] = y;
      y += lane;
    }
    y += gap;
  }
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(left + width + 20) << "\" height=\"" << num(y + 20)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<defs><marker id=\"arrow\" markerWidth=\"6\" markerHeight=\"6\" refX=\"5\" refY=\"3\" orient=\"auto\">"
       "<path d=\"M0,0 L6,3 L0,6 z\" fill=\"#333\"/></marker></defs>\n";
  o << "<text x=\"10\" y=\"20\" font-size=\"14\">" << escape(r.schedule) << " (" << escape(r.source) << ") makespan "
    << num(r.makespan_s * 1e6) << " us</text>\n";
  for (const auto& rank : r.ranks) {
    std::string label = "rank " + std::to_string(rank.rank);
    for (size_t i = 0; i < r.axis_names.size() && i < rank.coords.size(); ++i)
      label += (i ? "," : " (") + r.axis_names[i] + "=" + std::to_string(rank.coords[i]) + (i + 1 == r.axis_names.size() ? ")" : "");
    for (const auto& s : lanes[rank.rank]) {
      const double ly = lane_y[{rank.rank, s}];
      o << "<text x=\"10\" y=\"" << num(ly + lane - 5) << "\">" << escape(label + " " + s) << "</text>\n";
      o << "<line x1=\"" << num(left) << "\" y1=\"" << num(ly + lane) << "\" x2=\"" << num(left + width) << "\" y2=\"" << num(ly + lane)
        << "\" stroke=\"#eee\"/>\n";
    }
    for (const auto& op : rank.ops) {
      const double ly = lane_y[{rank.rank, op.stream}];
      const double w = std::max(0.5, x(op.end_s) - x(op.start_s));
      o << "<rect x=\"" << num(x(op.start_s)) << "\" y=\"" << num(ly + 2) << "\" width=\"" << num(w) << "\" height=\"" << num(lane - 4)
        << "\" fill=\"" << colour(op.op) << "\"><title>" << escape(op.id + " " + op.op + (op.name.empty() ? "" : " '" + op.name + "'")) << "\n"
        << num(op.start_s * 1e6) << " - " << num(op.end_s * 1e6) << " us, " << op.bytes << " bytes, " << op.flops << " flops</title></rect>\n";
    }
    for (const auto& f : rank.flows) {
      o << "<line x1=\"" << num(x(f.from_s)) << "\" y1=\"" << num(lane_y[{rank.rank, f.from_stream}] + lane / 2) << "\" x2=\""
        << num(x(f.to_s)) << "\" y2=\"" << num(lane_y[{rank.rank, f.to_stream}] + lane / 2)
        << "\" stroke=\"#333\" stroke-width=\"0.8\" marker-end=\"url(#arrow)\"><title>" << (f.join ? "async_done " : "async_start ")
        << escape(f.token) << "</title></line>\n";
    }
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace thunky
