#include "core/validate.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/collective_order.h"
#include "core/init.h"
#include "core/mesh.h"
#include "core/parallel.h"
#include "core/rank_walk.h"

namespace thunky {

RankCtx rank_ctx(const Mesh& m, int64_t rank) { return RankCtx{rank, rank_coords(m, rank)}; }

View resolve(const Program& p, const Ref& r, const RankCtx& ctx) {
  if (r.fixed >= 0) return p.fixed_views[static_cast<size_t>(r.fixed)];
  const Buffer& b = p.buffers[r.buffer];
  auto lookup = [&](std::string_view name) -> std::optional<int64_t> {
    auto ax = p.mesh.axis(name);
    if (!ax) return std::nullopt;
    return ctx.coords[*ax];
  };
  try {
    return resolve_view(r.buffer, b.shape, b.dtype, *r.syntax, lookup);
  } catch (const ThunkyError& e) {
    std::string where = p.mesh.size() > 1 ? " (on " + rank_label(p.mesh, ctx.rank) + ")" : "";
    throw ThunkyError(std::string(r.pointer), "ref '" + r.syntax->text() + "' of buffer '" + b.name + "' " + shape_str(b.shape) + ": " + e.what() + where);
  }
}

DType ref_dtype(const Program& p, const Ref& r) { return ref_dtype(*r.syntax, p.buffers[r.buffer].dtype); }

namespace {

// Walks every rank, on up to 8 threads, each a contiguous run of ranks
// (rank 0 with `first`'s options, the others with `rest`'s). A run stops at
// its first error: the lowest failing rank's is the one a walk of the
// ranks in order would meet.
std::vector<RankFindings> walk_ranks(const Program& p, int64_t ranks, const WalkOptions& first, const WalkOptions& rest) {
  const size_t n = static_cast<size_t>(ranks);
  std::vector<RankFindings> found(n);
  const size_t chunks = std::min<size_t>({hardware_threads(), n, 8});
  run_chunks(chunks, [&](size_t k) {
    for (size_t i = n * k / chunks, hi = n * (k + 1) / chunks; i < hi; ++i) {
      found[i] = walk_rank(p, static_cast<int64_t>(i), i == 0 ? first : rest);
      if (found[i].error) break;
    }
  });
  return found;
}

// Buffers and global layouts: init values, axes, shard shapes, npy files.
void check_buffers(const Program& p) {
  for (const auto& b : p.buffers) {
    if (b.init.kind == Init::Kind::values) {
      int64_t want = b.global ? 1 : b.count();
      if (b.global)
        for (auto d : b.global->shape) want *= d;
      if (static_cast<int64_t>(b.init.values.size()) != want)
        throw ThunkyError(b.pointer + "/init/values", "has " + std::to_string(b.init.values.size()) + " values for " + std::to_string(want) + " elements");
    }
    if (b.init.kind == Init::Kind::axis_index && !p.mesh.axis(b.init.axis))
      throw ThunkyError(b.pointer + "/init/axis", "unknown mesh axis '" + b.init.axis + "'");
    if (b.global) {
      if (b.global->shape.size() != b.shape.size())
        throw ThunkyError(b.pointer + "/global/shape", "global shape " + shape_str(b.global->shape) + " and local shape " + shape_str(b.shape) + " differ in rank");
      std::set<std::string> used;
      for (const auto& axes : b.global->spec)
        for (const auto& a : axes)
          if (!used.insert(a).second) throw ThunkyError(b.pointer + "/global/spec", "mesh axis '" + a + "' shards two dimensions");
      ShardLayout l;
      try {
        l = shard_layout(p.mesh, *b.global, 0);
      } catch (const ThunkyError& e) {
        throw ThunkyError(b.pointer + "/global", e.what());
      }
      if (l.local_shape != b.shape)
        throw ThunkyError(b.pointer + "/shape", "the spec splits global shape " + shape_str(b.global->shape) + " into shards of " + shape_str(l.local_shape) + ", but the buffer's shape is " + shape_str(b.shape));
    }
  }
  // npy files exist and have the declared (global) shape; their data is
  // read only by what runs the schedule.
  check_npy_inits(p);
}

}  // namespace

std::vector<Diagnostic> validate(const Program& p, const ValidateOptions& opts) {
  std::vector<Diagnostic> out;
  auto input_error = [&](const ThunkyError& e) { out.push_back({e.kind(), p.file, e.pointer(), e.what()}); };
  try {
    check_buffers(p);
  } catch (const ThunkyError& e) {
    input_error(e);
    return out;
  }

  // Rank 0's walk also checks what is the same on every rank (tokens,
  // names) and tracks races on every buffer. The other ranks, walked where
  // their walks can differ (below), track races only where a view moves
  // with the rank: on a buffer no view of which moves, every rank makes
  // rank 0's accesses, so rank 0's races there are every rank's.
  const int64_t ranks = p.mesh.size();
  const Program::RankUse& use = p.rank_use;
  const bool dependent = ranks > 1 && use.moves;
  // Where no view's size moves with the rank, every rank issues the same
  // collectives, of the same sizes, and each communicator's members all
  // meet each of them (its members are one class of the axes' or groups'
  // partition): the sequences cannot differ, and are not compared.
  const bool check_order = opts.collective_order && ranks > 1 && use.sized;
  // A rank's walk differs from rank 0's only through views that move with
  // the rank (lowering counts a collective's groups among them) and through
  // a gather's or scatter's place in its communicator: without either, rank
  // 0's walk stands for every rank.
  const int64_t walked = use.moves || use.positional ? ranks : 1;
  std::vector<RankFindings> walks =
      walk_ranks(p, walked, {.structural = true, .races = opts.races, .sequences = check_order},
                 {.structural = false, .races = opts.races && dependent, .race_buffers = &use.moving_buffers, .sequences = check_order});
  auto findings = [&](int64_t r) -> RankFindings& { return walks[static_cast<size_t>(r)]; };

  for (const auto& e : findings(0).unawaited) input_error(e);
  for (int64_t r = 0; r < walked; ++r) {
    if (!findings(r).error) continue;
    try {
      std::rethrow_exception(findings(r).error);
    } catch (const ThunkyError& e) {
      input_error(e);
    }
    return out;
  }

  // Races, each message once, with the ranks it holds on.
  std::map<std::string, std::vector<int64_t>> race_ranks;
  std::map<std::string, std::string> race_pointer;  // message -> the later command's id
  std::vector<std::string> race_order;
  for (int64_t r = 0; r < walked; ++r) {
    for (const auto& race : findings(r).races) {
      if (!race_ranks.count(race.message)) {
        race_order.push_back(race.message);
        race_pointer[race.message] = race.pointer;
      }
      std::vector<int64_t>& on = race_ranks[race.message];
      if (r == 0 && dependent && !use.moving_buffers[static_cast<size_t>(race.buffer)])
        for (int64_t q = 0; q < ranks; ++q) on.push_back(q);
      else
        on.push_back(r);
    }
  }
  for (const auto& key : race_order) {
    if (out.size() >= opts.max_errors) break;
    const auto& rs = race_ranks[key];
    std::string where = ranks > 1 ? (static_cast<int64_t>(rs.size()) == ranks || !dependent ? " (on every rank)" : " (on ranks " + rank_list(rs) + ")") : "";
    out.push_back({ErrorKind::schedule, p.file, race_pointer[key], key + where});
  }

  if (check_order && out.size() < opts.max_errors) {
    CollectiveSequences comm_seqs;
    for (int64_t r = 0; r < walked; ++r)
      for (auto& [comm, seq] : findings(r).collectives) comm_seqs[comm].emplace_back(r, std::move(seq));
    if (auto d = collective_order(p, comm_seqs)) out.push_back(*d);
  }
  return out;
}

}  // namespace thunky
