# Shared by scripts/gpu-deps.sh and scripts/gpu-check.sh (sourced).

# A hash of the sources the binaries are built from: the pack's binaries
# are used only while it matches (a copy of the tree has no .git to ask).
source_hash() {
  find CMakeLists.txt core exec sim tools bench tests -type f \( -name '*.cc' -o -name '*.h' -o -name 'CMakeLists.txt' \) 2>/dev/null |
    LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16
}
