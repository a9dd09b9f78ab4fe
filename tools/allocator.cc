// Compiled into every tool and benchmark that links mimalloc (CMake's
// thunky_alloc):
// - the heap asks the OS for 2 MiB pages where transparent huge pages
//   allow it (madvise mode), so loading a large schedule takes a few
//   hundred page faults instead of tens of thousands; the environment
//   still decides: MIMALLOC_LARGE_OS_PAGES=0 turns it off;
// - operator new and delete are defined here on mimalloc's malloc, so that
//   an allocation that fails throws std::bad_alloc (which the tools turn
//   into a one-line error, exit 2): mimalloc's own operator new, built as
//   C, aborts instead. A program that counts its allocations with its own
//   operator new (sim_bench) defines THUNKY_OWN_OPERATOR_NEW.
#include <mimalloc.h>

#include <cstddef>
#include <new>

namespace {

const bool large_pages = [] {
  mi_option_set_enabled_default(mi_option_large_os_pages, true);
  return true;
}();

#ifndef THUNKY_OWN_OPERATOR_NEW
void* allocate(std::size_t n) {
  if (void* p = mi_malloc(n)) return p;
  throw std::bad_alloc();
}

void* allocate(std::size_t n, std::align_val_t a) {
  if (void* p = mi_malloc_aligned(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}

#endif
}  // namespace

#ifndef THUNKY_OWN_OPERATOR_NEW
void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return mi_malloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return mi_malloc(n); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return mi_malloc_aligned(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return mi_malloc_aligned(n, static_cast<std::size_t>(a)); }

void operator delete(void* p) noexcept { mi_free(p); }
void operator delete[](void* p) noexcept { mi_free(p); }
void operator delete(void* p, std::size_t) noexcept { mi_free(p); }
void operator delete[](void* p, std::size_t) noexcept { mi_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { mi_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { mi_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { mi_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { mi_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { mi_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { mi_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { mi_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { mi_free(p); }
#endif
