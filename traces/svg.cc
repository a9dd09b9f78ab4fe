#include "traces/svg.h"

#include <cmath>
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

// The kinds of command the legend names, with their colours.
struct Kind {
  const char* label;
  const char* example_op;
};
constexpr Kind kKinds[] = {{"GEMM", "gemm"}, {"collective", "all_reduce"}, {"map, reduce", "map"}, {"copy, memset", "copy"},
                           {"kernel, custom", "kernel"}, {"other", "cond"}};

// A tick step of 1, 2 or 5 times a power of ten giving at most about 10
// ticks over `span` seconds, and the unit to print it in.
struct Axis {
  double step = 1, scale = 1;
  const char* unit = "s";
};
Axis time_axis(double span) {
  Axis a;
  const double raw = span / 10;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  a.step = raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
  if (span < 1e-6) a.scale = 1e9, a.unit = "ns";
  else if (span < 1e-3) a.scale = 1e6, a.unit = "us";
  else if (span < 1) a.scale = 1e3, a.unit = "ms";
  return a;
}

std::string tick_label(double t, const Axis& a) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", t * a.scale);
  return b;
}

}  // namespace

std::string timeline_svg(const Report& r) {
  const double left = 210, width = 1000, lane = 18, gap = 10, top = 76;
  const double span = r.makespan_s > 0 ? r.makespan_s : 1e-9;
  auto x = [&](double t) { return left + width * t / span; };
  // Lanes: per rank, its streams in first-use order, computation:0 first.
  std::map<int64_t, std::vector<std::string>> lanes;
  for (const auto& rank : r.ranks) {
    auto& v = lanes[rank.rank];
    v.push_back("computation:0");
    std::set<std::string> seen{"computation:0"};
    const RankReport& line = r.timeline(rank);
    for (const auto& op : line.ops)
      if (seen.insert(op.stream).second) v.push_back(op.stream);
    for (const auto& f : line.flows)
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
  // Which ranks, when some are left out.
  int64_t mesh = 1;
  for (auto d : r.mesh_shape) mesh *= d;
  std::string notes;
  if (static_cast<int64_t>(r.ranks.size()) < mesh) notes = std::to_string(r.ranks.size()) + " of " + std::to_string(mesh) + " ranks shown (--trace-ranks chooses)";
  size_t most_flows = 0;
  for (const auto& rank : r.ranks) most_flows = std::max(most_flows, r.timeline(rank).flows.size());
  if (static_cast<double>(most_flows) > width / 5)
    notes += (notes.empty() ? "" : "; ") + std::string("token arrows left out where a rank has more than ") + std::to_string(static_cast<int>(width / 5));
  if (!notes.empty()) o << "<text x=\"10\" y=\"36\" fill=\"#a00\">" << escape(notes) << "</text>\n";
  // The legend.
  double lx = left + 300;
  for (const auto& k : kKinds) {
    o << "<rect x=\"" << num(lx) << "\" y=\"10\" width=\"12\" height=\"12\" fill=\"" << colour(k.example_op) << "\"/>"
      << "<text x=\"" << num(lx + 16) << "\" y=\"20\">" << k.label << "</text>\n";
    lx += 30 + 6.5 * static_cast<double>(std::string(k.label).size());
  }
  // The time axis: ticks and grid lines over every lane.
  const Axis axis = time_axis(span);
  o << "<text x=\"" << num(left - 8) << "\" y=\"" << num(top - 24) << "\" text-anchor=\"end\">time (" << axis.unit << ")</text>\n";
  o << "<line x1=\"" << num(left) << "\" y1=\"" << num(top - 18) << "\" x2=\"" << num(left + width) << "\" y2=\"" << num(top - 18)
    << "\" stroke=\"#333\"/>\n";
  for (double t = 0; t <= span * (1 + 1e-9); t += axis.step) {
    o << "<line x1=\"" << num(x(t)) << "\" y1=\"" << num(top - 22) << "\" x2=\"" << num(x(t)) << "\" y2=\"" << num(y)
      << "\" stroke=\"#ddd\" stroke-width=\"0.6\"/>"
      << "<text x=\"" << num(x(t)) << "\" y=\"" << num(top - 26) << "\" text-anchor=\"middle\">" << tick_label(t, axis) << "</text>\n";
  }
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
    const RankReport& line = r.timeline(rank);
    for (const auto& op : line.ops) {
      const double ly = lane_y[{rank.rank, op.stream}];
      const double w = std::max(0.5, x(op.end_s) - x(op.start_s));
      o << "<rect x=\"" << num(x(op.start_s)) << "\" y=\"" << num(ly + 2) << "\" width=\"" << num(w) << "\" height=\"" << num(lane - 4)
        << "\" fill=\"" << colour(op.op) << "\"><title>" << escape(op.id + " " + op.op + (op.name.empty() ? "" : " '" + op.name + "'")) << "\n"
        << num(op.start_s * 1e6) << " - " << num(op.end_s * 1e6) << " us, " << op.bytes << " bytes, " << op.flops << " flops</title></rect>\n";
      // A label where the bar holds it (about 6 px a character).
      const std::string label = op.name.empty() ? op.op : op.name;
      if (w >= 6.0 * static_cast<double>(label.size()) + 6)
        o << "<text x=\"" << num(x(op.start_s) + 3) << "\" y=\"" << num(ly + lane - 5) << "\" fill=\"#fff\" font-size=\"10\">" << escape(label)
          << "</text>\n";
    }
    // Arrows only where they can be told apart: past one per 5 px of the
    // time axis they would paint the lanes black.
    if (static_cast<double>(line.flows.size()) > width / 5) continue;
    for (const auto& f : line.flows) {
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
