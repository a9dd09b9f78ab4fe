#include "tools/dump.h"

#include <filesystem>
#include <functional>
#include <iostream>

#include "core/files.h"
#include "core/init.h"
#include "core/npy.h"
#include "exec/cores.h"

namespace thunky::cli {

namespace {

bool dumped(const Buffer& b, Dumped which) {
  return which == Dumped::outputs ? b.role == Role::output || b.role == Role::inout : b.role == Role::input || b.role == Role::inout;
}

}  // namespace

// The files a run reads: the schedule, its .npy inits and PTX files.
std::vector<std::string> inputs_of(const Program& p) {
  namespace fs = std::filesystem;
  std::vector<std::string> in = {p.file};
  const fs::path base = fs::path(p.file).parent_path();
  for (const auto& b : p.buffers)
    if (b.init.kind == Init::Kind::npy) in.push_back((base / b.init.path).string());
  std::function<void(const Block&)> walk = [&](const Block& block) {
    for (const auto& c : block) {
      if (const PtxKernel* k = c.get_if<PtxKernel>(); k && !k->launch->ptx_file.empty()) in.push_back((base / k->launch->ptx_file).string());
      for_each_sub_block(c, walk);
    }
  };
  walk(p.program);
  return in;
}

int dump(const Program& p, const ExecResult& r, const std::string& dir, Dumped which) {
  namespace fs = std::filesystem;
  // Every file lands inside `dir`: a buffer whose name holds a path
  // separator would write elsewhere, and no dump may replace an input.
  const std::vector<std::string> inputs = inputs_of(p);
  for (const auto& buf : p.buffers) {
    if (!dumped(buf, which)) continue;
    if (buf.name.find('/') != std::string::npos || buf.name.find('\\') != std::string::npos || buf.name.empty()) {
      std::cerr << p.file << ":" << buf.pointer << ": buffer name '" << buf.name << "' cannot name a dump file (it holds a path separator); rename the buffer to dump it\n";
      return 2;
    }
    for (int64_t rank = 0; rank < p.mesh.size(); ++rank)
      if (overwrites_input((fs::path(dir) / (buf.name + ".rank" + std::to_string(rank) + ".npy")).string(), inputs) ||
          (buf.global && overwrites_input((fs::path(dir) / (buf.name + ".npy")).string(), inputs))) {
        std::cerr << dir << ": dumping buffer '" << buf.name << "' would overwrite an input of the run; choose another directory\n";
        return 2;
      }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::cerr << dir << ": cannot create the dump directory: " << ec.message() << "\n";
    return 2;
  }
  try {
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const auto& buf = p.buffers[b];
      if (!dumped(buf, which)) continue;
      for (int64_t rank = 0; rank < p.mesh.size(); ++rank)
        write_npy((fs::path(dir) / (buf.name + ".rank" + std::to_string(rank) + ".npy")).string(), buf.dtype, buf.shape,
                          r.memory[rank][b].data());
      if (buf.global) {
        auto g = gather_global(p, static_cast<int>(b), r);
        write_npy((fs::path(dir) / (buf.name + ".npy")).string(), buf.dtype, buf.global->shape, g.data());
      }
    }
  } catch (const ThunkyError& e) {
    std::cerr << dir << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}


ExecResult initial_inputs(const Program& p) {
  // Every rank's copy is held at once (the gathered globals need them all):
  // counted before any is made.
  double bytes = 0;
  for (const auto& b : p.buffers)
    if (dumped(b, Dumped::inputs)) bytes += static_cast<double>(b.bytes()) * static_cast<double>(p.mesh.size());
  if (bytes > static_cast<double>(host_memory_limit()))
    throw ThunkyError("", "--dump-inputs would hold " + std::to_string(static_cast<int64_t>(bytes)) + " bytes (" + std::to_string(p.mesh.size()) +
                              " ranks x every input and inout buffer), more than this host's limit of " + std::to_string(host_memory_limit()) +
                              " (3/4 of its memory)");
  ExecResult r;
  const auto npy = load_npy_inits(p);
  r.memory.resize(static_cast<size_t>(p.mesh.size()));
  for (int64_t rank = 0; rank < p.mesh.size(); ++rank) {
    auto& mem = r.memory[static_cast<size_t>(rank)];
    mem.resize(p.buffers.size());
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (!dumped(p.buffers[b], Dumped::inputs)) continue;
      mem[b].resize(p.buffers[b].bytes());
      init_buffer(p, p.buffers[b], rank, npy, mem[b].data());
    }
  }
  return r;
}

int dump_inputs(const Program& p, const std::string& dir) {
  try {
    return dump(p, initial_inputs(p), dir, Dumped::inputs);
  } catch (const ThunkyError& e) {
    std::cerr << p.file << ":" << (e.pointer().empty() ? "/" : e.pointer()) << ": " << e.what() << "\n";
    return 2;
  }
}

}  // namespace thunky::cli
