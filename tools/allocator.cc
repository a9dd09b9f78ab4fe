// Compiled into every tool and benchmark that links mimalloc (CMake's
// thunky_alloc): the heap asks the OS for 2 MiB pages where transparent
// huge pages allow it (madvise mode), so loading a large schedule takes a
// few hundred page faults instead of tens of thousands. The environment
// still decides: MIMALLOC_LARGE_OS_PAGES=0 turns it off.
#include <mimalloc.h>

namespace {

const bool large_pages = [] {
  mi_option_set_enabled_default(mi_option_large_os_pages, true);
  return true;
}();

}  // namespace
