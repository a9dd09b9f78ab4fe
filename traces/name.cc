#include "traces/name.h"

#include <mutex>
#include <unordered_set>

namespace thunky {

namespace {

// Every name made, never freed (a set's nodes do not move). Lookups are
// by text; reports are built and read on any thread.
struct Names {
  std::mutex mutex;
  std::unordered_set<std::string> texts;
};

Names& names() {
  static Names* n = new Names;  // outlives every static Name
  return *n;
}

}  // namespace

const std::string* Name::empty_text() {
  static const std::string* e = [] {
    Names& n = names();
    std::lock_guard lock(n.mutex);
    return &*n.texts.emplace().first;
  }();
  return e;
}

Name::Name(std::string_view text) {
  if (text.empty()) return;
  // The last few names this thread made, checked first: a report's names
  // come in runs (one op kind, one stream).
  thread_local const std::string* recent[4] = {};
  thread_local unsigned next = 0;
  for (const std::string* r : recent)
    if (r && *r == text) {
      text_ = r;
      return;
    }
  Names& n = names();
  {
    std::lock_guard lock(n.mutex);
    text_ = &*n.texts.emplace(text).first;
  }
  recent[next++ % 4] = text_;
}

}  // namespace thunky
