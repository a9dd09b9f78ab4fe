// A fixed table of the values made most recently from texts, by hash: a
// text seen again finds its value while no other text has taken its slot,
// and a text seen once costs a slot, not a node of an ever-growing map.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace thunky {

template <class T, size_t Slots = 1024>
class RecentTable {
  static_assert((Slots & (Slots - 1)) == 0, "Slots is a power of two");

 public:
  // The value for `text`, made by make() (which may throw) when absent.
  template <class Make>
  const T& get(std::string_view text, Make&& make) {
    const size_t h = std::hash<std::string_view>{}(text);
    Slot& s = slots_[h & (Slots - 1)];
    if (!s.value || s.hash != h || s.text != text) {
      s.value = make();
      s.hash = h;
      s.text.assign(text);
    }
    return s.value;
  }

 private:
  struct Slot {
    size_t hash = 0;
    std::string text;
    T value;  // empty (false) until made
  };
  std::vector<Slot> slots_ = std::vector<Slot>(Slots);
};

}  // namespace thunky
