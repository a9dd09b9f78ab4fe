// How an op's description reads its fields from sched.json and writes them
// back. Each op's `read` takes an OpReader over its command's JSON object;
// every error names the JSON pointer of the field. The reader marks the keys
// it is asked for, so a key no op reads is refused as unknown.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/expr.h"
#include "core/ops/base.h"
#include "core/reduction.h"

namespace thunky {

namespace json_reader {
class Obj;
}

class OpReader {
 public:
  OpReader(json_reader::Obj& o, int depth) : o_(o), depth_(depth) {}
  json_reader::Obj& obj() { return o_; }
  // The command's JSON pointer.
  const std::string& ptr() const;
  // The pointer of one of its fields.
  std::string at(std::string_view key) const;
  // Refuses the field `key` (the command itself where empty), or the
  // element `index` of the list at `key`.
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  [[noreturn]] void fail(std::string_view key, size_t index, const std::string& message) const;

  Ref ref(std::string_view key);
  // A list of refs; absent is an empty list unless `required`.
  std::vector<Ref> refs(std::string_view key, bool required);
  // An object of names to refs, in the document's order (map inputs, call
  // arguments); absent is empty.
  std::vector<std::pair<std::string, Ref>> named_refs(std::string_view key);
  std::string str(std::string_view key);
  // A memset's 32-bit pattern: an integer or a "0x..." string.
  uint32_t bits(std::string_view key);
  // A map expression, its text kept in `text`.
  ExprPtr expr(std::string_view key, std::string& text);
  // Reads the object at `key`, where present, with its own reader; its
  // keys must all be read.
  void nested(std::string_view key, const std::function<void(OpReader&)>& read);
  std::string str_or(std::string_view key, std::string fallback);
  bool has(std::string_view key) const;
  // An integer, where present.
  std::optional<int64_t> int_or_none(std::string_view key);
  std::vector<int64_t> ints(std::string_view key);
  // A list of lists of integers, where present (`expected` is the
  // message for anything but a list).
  std::optional<std::vector<std::vector<int64_t>>> int_lists(std::string_view key, const char* expected);
  // One name or a non-empty list of names (mesh axes).
  std::vector<std::string> names(std::string_view key);
  // A reduction by name: absent is sum unless `required`; `expected`
  // lists the names taken, for the message.
  Reduction reduction(std::string_view key, bool required, const char* expected);
  StreamId stream(std::string_view key);
  // A block of commands, nested one level deeper; `required` or else
  // absent is empty.
  Block block(std::string_view key, bool required = true);
  // A non-empty list of blocks (a switch's branches).
  std::vector<Block> blocks(std::string_view key);
  // The simulator's hint `"sim": {key: ...}`: a count (>= 0) or a flag.
  std::optional<int64_t> sim_count(std::string_view key);
  std::optional<bool> sim_flag(std::string_view key);

 private:
  json_reader::Obj& o_;
  int depth_;
};

json ref_json(const Ref& r);
json refs_json(const std::vector<Ref>& refs);
json block_json(const Block& b);
json named_refs_json(const std::vector<std::pair<std::string, Ref>>& refs);
json stream_json(const StreamId& s);

}  // namespace thunky
