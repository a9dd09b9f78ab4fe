// libFuzzer target: load + lower + validate any bytes. Built with
// -DTHUNKY_FUZZ=ON and clang; the corpus is seeded from examples/ and
// tests/malformed/. Any crash, sanitizer report or hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto p = thunky::load_schedule_text(text, "fuzz.json");
  if (!p) {
    for (const auto& e : p.errors()) (void)e.str();
  }
  return 0;
}
