#include "traces/svg.h"

#include "core/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

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

// A command's colour by its op's family and, for compute, its class.
const char* colour(const std::string& name) {
  const std::optional<Op> op = op_named(name);
  if (!op) return "#76b7b2";
  if (is_collective(*op)) return "#f28e2b";
  const std::optional<ComputeClass> k = compute_class(*op);
  if (!k) return "#76b7b2";  // structure: control flow, events
  switch (*k) {
    case ComputeClass::gemm: return "#4e79a7";
    case ComputeClass::arithmetic: return "#59a14f";
    case ComputeClass::movement: return "#9c9c9c";
    case ComputeClass::opaque: return "#b07aa1";
  }
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
constexpr Kind kKinds[] = {{"GEMM", "gemm"}, {"collective", "all_reduce"}, {"map, reduce", "map"}, {"copy, memset, transpose", "copy"},
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

// The page's frame: its size, the arrow marker and the title.
void open_svg(std::ostringstream& o, double width, double height, const std::string& title) {
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<defs><marker id=\"arrow\" markerWidth=\"6\" markerHeight=\"6\" refX=\"5\" refY=\"3\" orient=\"auto\">"
       "<path d=\"M0,0 L6,3 L0,6 z\" fill=\"#333\"/></marker>"
       // A collective's wait for its other members: hatched over its bar.
       "<pattern id=\"wait\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
       "<rect width=\"6\" height=\"6\" fill=\"#fff\" fill-opacity=\"0.55\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#333\" stroke-width=\"2\"/>"
       "</pattern></defs>\n";
  o << "<text x=\"10\" y=\"20\" font-size=\"14\">" << escape(title) << "</text>\n";
}

// The kinds of command and their colours, from x = lx with its boxes' top
// at y; returns where it ends.
double draw_legend(std::ostringstream& o, double lx, double y) {
  for (const auto& k : kKinds) {
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(y) << "\" width=\"12\" height=\"12\" fill=\"" << colour(k.example_op) << "\"/>"
      << "<text x=\"" << num(lx + 16) << "\" y=\"" << num(y + 10) << "\">" << k.label << "</text>\n";
    lx += 30 + 6.5 * static_cast<double>(std::string(k.label).size());
  }
  o << "<rect x=\"" << num(lx) << "\" y=\"" << num(y) << "\" width=\"12\" height=\"12\" fill=\"" << colour("all_reduce") << "\"/>"
    << "<rect x=\"" << num(lx) << "\" y=\"" << num(y) << "\" width=\"12\" height=\"12\" fill=\"url(#wait)\"/>"
    << "<text x=\"" << num(lx + 16) << "\" y=\"" << num(y + 10) << "\">waiting for peers</text>\n";
  lx += 30 + 6.5 * 17;
  return lx;
}

// The time axis over [left, left + width] for `span` seconds: ticks above
// `top` and grid lines down to `bottom`.
void draw_time_axis(std::ostringstream& o, double left, double width, double top, double bottom, double span) {
  const Axis axis = time_axis(span);
  o << "<text x=\"" << num(left - 8) << "\" y=\"" << num(top - 24) << "\" text-anchor=\"end\">time (" << axis.unit << ")</text>\n";
  o << "<line x1=\"" << num(left) << "\" y1=\"" << num(top - 18) << "\" x2=\"" << num(left + width) << "\" y2=\"" << num(top - 18)
    << "\" stroke=\"#333\"/>\n";
  for (double t = 0; t <= span * (1 + 1e-9); t += axis.step) {
    const double x = left + width * t / span;
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(top - 22) << "\" x2=\"" << num(x) << "\" y2=\"" << num(bottom)
      << "\" stroke=\"#ddd\" stroke-width=\"0.6\"/>"
      << "<text x=\"" << num(x) << "\" y=\"" << num(top - 26) << "\" text-anchor=\"middle\">" << tick_label(t, axis) << "</text>\n";
  }
}

// "rank 3 (x=1,y=1)"
std::string rank_label(const Report& r, const RankReport& rank) {
  if (!rank.label.empty()) return rank.label;
  std::string label = "rank " + std::to_string(rank.rank);
  for (size_t i = 0; i < r.axis_names.size() && i < rank.coords.size(); ++i)
    label += (i ? "," : " (") + r.axis_names[i] + "=" + std::to_string(rank.coords[i]) + (i + 1 == r.axis_names.size() ? ")" : "");
  return label;
}

// A rank's streams in first-use order, computation:0 first, over its
// ops and token edges in each of `lines`.
std::vector<std::string> streams_of(const std::vector<const RankReport*>& lines) {
  std::vector<std::string> v = {"computation:0"};
  std::set<std::string> seen{"computation:0"};
  for (const RankReport* line : lines) {
    for (const auto& op : line->ops)
      if (seen.insert(op.stream).second) v.push_back(op.stream);
    for (const auto& f : line->flows)
      for (const auto* s : {&f.from_stream, &f.to_stream})
        if (seen.insert(*s).second) v.push_back(*s);
  }
  return v;
}

// A command's bar, with its label where the bar holds it (about 6 px a
// character) and `tooltip` on hover.
void draw_bar(std::ostringstream& o, const OpRecord& op, double x0, double x1, double y, double h, const std::string& tooltip,
              const std::string& extra = "", const char* text_colour = "#fff") {
  const double w = std::max(0.5, x1 - x0);
  o << "<rect x=\"" << num(x0) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\"" << num(h) << "\" fill=\"" << colour(op.op)
    << "\"" << extra << "><title>" << escape(tooltip) << "</title></rect>\n";
  // The wait before the transfer, hatched, as a share of the bar; the
  // label goes on the transfer's part, where it reads.
  double ww = 0;
  if (op.transfer_start() > op.start_s && op.end_s > op.start_s) {
    ww = w * (op.transfer_start() - op.start_s) / (op.end_s - op.start_s);
    char wait[64];
    std::snprintf(wait, sizeof wait, "waiting %.3f us for the other members of ", (op.transfer_start() - op.start_s) * 1e6);
    std::string title = wait;
    title += op.id.str();
    o << "<rect x=\"" << num(x0) << "\" y=\"" << num(y) << "\" width=\"" << num(std::max(0.5, ww)) << "\" height=\"" << num(h)
      << "\" fill=\"url(#wait)\"><title>" << escape(title) << "</title></rect>\n";
  }
  const std::string label = op.name.str().empty() ? op.op.str() : op.name.str();
  if (w - ww >= 6.0 * static_cast<double>(label.size()) + 6)
    o << "<text x=\"" << num(x0 + ww + 3) << "\" y=\"" << num(y + h - 3) << "\" fill=\"" << text_colour << "\" font-size=\"10\" pointer-events=\"none\">" << escape(label)
      << "</text>\n";
}

}  // namespace

std::string timeline_svg(const Report& r) {
  std::map<int64_t, std::vector<std::string>> lanes;
  for (const auto& rank : r.ranks) lanes[rank.rank] = streams_of({&r.timeline(rank)});
  // The lanes start past their longest label (about 6.5 px a character):
  // a class of ranks is named at length.
  size_t longest = 0;
  for (const auto& rank : r.ranks)
    for (const auto& s : lanes[rank.rank]) longest = std::max(longest, rank_label(r, rank).size() + 1 + s.size());
  const double left = std::max(210.0, 20 + 6.5 * static_cast<double>(longest)), width = 1000, lane = 18, gap = 10, top = 76;
  const double span = r.makespan_s > 0 ? r.makespan_s : 1e-9;
  auto x = [&](double t) { return left + width * t / span; };
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
  open_svg(o, left + width + 20, y + 20, r.schedule + " (" + r.source + ") makespan " + num(r.makespan_s * 1e6) + " us");
  // Which ranks, when some are left out.
  int64_t mesh = 1;
  for (auto d : r.mesh_shape) mesh *= d;
  std::string notes;
  const bool by_class = std::any_of(r.ranks.begin(), r.ranks.end(), [](const RankReport& x) { return !x.label.empty(); });
  if (by_class) notes = std::to_string(r.ranks.size()) + " classes of the " + std::to_string(mesh) + " ranks, a lane group each (--trace-ranks for ranks)";
  else if (static_cast<int64_t>(r.ranks.size()) < mesh) notes = std::to_string(r.ranks.size()) + " of " + std::to_string(mesh) + " ranks shown (--trace-ranks chooses)";
  size_t most_flows = 0;
  for (const auto& rank : r.ranks) most_flows = std::max(most_flows, r.timeline(rank).flows.size());
  if (static_cast<double>(most_flows) > width / 5)
    notes += (notes.empty() ? "" : "; ") + std::string("token arrows left out where a rank has more than ") + std::to_string(static_cast<int>(width / 5));
  if (!notes.empty()) o << "<text x=\"10\" y=\"36\" fill=\"#a00\">" << escape(notes) << "</text>\n";
  draw_legend(o, left + 300, 10);
  draw_time_axis(o, left, width, top, y, span);
  for (const auto& rank : r.ranks) {
    const std::string label = rank_label(r, rank);
    for (const auto& s : lanes[rank.rank]) {
      const double ly = lane_y[{rank.rank, s}];
      o << "<text x=\"10\" y=\"" << num(ly + lane - 5) << "\">" << escape(label + " " + s) << "</text>\n";
      o << "<line x1=\"" << num(left) << "\" y1=\"" << num(ly + lane) << "\" x2=\"" << num(left + width) << "\" y2=\"" << num(ly + lane)
        << "\" stroke=\"#eee\"/>\n";
    }
    const RankReport& line = r.timeline(rank);
    for (const auto& op : line.ops)
      draw_bar(o, op, x(op.start_s), x(op.end_s), lane_y[{rank.rank, op.stream}] + 2, lane - 4,
               op.id + " " + op.op + (op.name.str().empty() ? "" : " '" + op.name + "'") + "\n" + num(op.start_s * 1e6) + " - " + num(op.end_s * 1e6) +
                   " us, " + std::to_string(op.bytes) + " bytes, " + num(op.flops) + " flops" +
                   (op.interference_s > 0 ? ", " + num(op.interference_s * 1e6) + " us lost to interference" : ""));
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

std::string comparison_svg(const Report& predicted, const Report& measured, double divergent) {
  const double left = 250, width = 1000, lane = 16, gap = 12, top = 92;
  const double span = std::max({predicted.makespan_s, measured.makespan_s, 1e-9});
  auto x = [&](double t) { return left + width * t / span; };
  // The predicted timeline of each measured rank (a folded rank's is its source's).
  std::map<int64_t, const RankReport*> pred;
  for (const auto& rank : predicted.ranks) pred[rank.rank] = &predicted.timeline(rank);
  struct Row {
    int64_t rank;
    std::string stream;
    bool measured;
    double y;
  };
  std::vector<Row> rows;
  std::map<std::tuple<int64_t, std::string, bool>, double> row_y;
  double y = top;
  for (const auto& rank : measured.ranks) {
    std::vector<const RankReport*> lines = {&measured.timeline(rank)};
    if (auto it = pred.find(rank.rank); it != pred.end()) lines.push_back(it->second);
    for (const auto& s : streams_of(lines))
      for (bool meas : {false, true}) {
        rows.push_back({rank.rank, s, meas, y});
        row_y[{rank.rank, s, meas}] = y;
        y += lane;
      }
    y += gap;
  }
  std::ostringstream o;
  open_svg(o, left + width + 20, y + 20,
           measured.schedule + ": predicted (" + (predicted.machine ? *predicted.machine : std::string("sim")) + ") " + num(predicted.makespan_s * 1e6) +
               " us against measured (" + (measured.backend ? *measured.backend : std::string("exec")) + ") " + num(measured.makespan_s * 1e6) + " us");
  double lx = draw_legend(o, 10, 28);
  o << "<rect x=\"" << num(lx) << "\" y=\"28\" width=\"12\" height=\"12\" fill=\"#4e79a7\" fill-opacity=\"0.45\" stroke=\"#4e79a7\" stroke-dasharray=\"2,1\"/>"
    << "<text x=\"" << num(lx + 16) << "\" y=\"38\">predicted (pale)</text>\n";
  lx += 130;
  o << "<rect x=\"" << num(lx) << "\" y=\"28\" width=\"12\" height=\"12\" fill=\"#4e79a7\"/><text x=\"" << num(lx + 16) << "\" y=\"38\">measured</text>\n";
  lx += 90;
  o << "<rect x=\"" << num(lx) << "\" y=\"28\" width=\"12\" height=\"12\" fill=\"#4e79a7\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"" << num(lx + 16)
    << "\" y=\"38\">measured, duration off the prediction by more than " << tick_label(divergent, Axis{1, 100, "%"}) << "%</text>\n";
  o << "<text x=\"10\" y=\"56\" fill=\"#555\">hover a command for its id, op, both times and the error</text>\n";
  draw_time_axis(o, left, width, top, y, span);
  for (const auto& row : rows) {
    const std::string label = (row.measured ? "  measured" : rank_label(measured, *std::find_if(measured.ranks.begin(), measured.ranks.end(),
                                                                                              [&](const RankReport& r) { return r.rank == row.rank; })) +
                                                              " " + row.stream + " predicted");
    o << "<text x=\"" << num(left - 8) << "\" y=\"" << num(row.y + lane - 4) << "\" text-anchor=\"end\"" << (row.measured ? "" : " fill=\"#555\"") << ">"
      << escape(row.measured ? "measured" : label) << "</text>\n";
    if (row.measured)
      o << "<line x1=\"" << num(left) << "\" y1=\"" << num(row.y + lane) << "\" x2=\"" << num(left + width) << "\" y2=\"" << num(row.y + lane)
        << "\" stroke=\"#e4e4e4\"/>\n";
  }
  for (const auto& rank : measured.ranks) {
    const RankReport& meas = measured.timeline(rank);
    const RankReport* p = pred.count(rank.rank) ? pred[rank.rank] : nullptr;
    std::map<std::string, const OpRecord*> pred_ops, meas_ops;
    if (p)
      for (const auto& op : p->ops) pred_ops[op.id.str()] = &op;
    for (const auto& op : meas.ops) meas_ops[op.id.str()] = &op;
    auto times = [](const OpRecord* op) {
      return op ? num(op->start_s * 1e6) + " - " + num(op->end_s * 1e6) + " us (" + num((op->end_s - op->start_s) * 1e6) + " us)" : std::string("none");
    };
    // One tooltip for both bars of a command.
    auto tooltip = [&](const std::string& id, const OpRecord* pr, const OpRecord* me) {
      const OpRecord* any = me ? me : pr;
      std::string t = id + " " + any->op + (any->name.str().empty() ? "" : " '" + any->name + "'") + "\npredicted " + times(pr) + "\nmeasured " + times(me);
      if (pr && me && me->end_s > me->start_s) {
        const double e = ((pr->end_s - pr->start_s) - (me->end_s - me->start_s)) / (me->end_s - me->start_s);
        t += "\nerror " + std::string(e >= 0 ? "+" : "") + num(e * 100) + "%";
      }
      return t;
    };
    for (const auto& [id, op] : pred_ops) {
      const auto m = meas_ops.find(id);
      draw_bar(o, *op, x(op->start_s), x(op->end_s), row_y[{rank.rank, op->stream.str(), false}] + 2, lane - 4,
               tooltip(id, op, m == meas_ops.end() ? nullptr : m->second), " fill-opacity=\"0.45\" stroke=\"" + std::string(colour(op->op)) + "\" stroke-dasharray=\"2,1\"",
               "#222");
    }
    for (const auto& [id, op] : meas_ops) {
      const auto pr = pred_ops.find(id);
      const OpRecord* po = pr == pred_ops.end() ? nullptr : pr->second;
      const double md = op->end_s - op->start_s;
      const bool off = po && md > 0 && std::fabs((po->end_s - po->start_s) - md) / md > divergent;
      draw_bar(o, *op, x(op->start_s), x(op->end_s), row_y[{rank.rank, op->stream.str(), true}] + 2, lane - 4, tooltip(id, po, op),
               off ? " stroke=\"#d62728\" stroke-width=\"2\"" : "");
    }
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace thunky
