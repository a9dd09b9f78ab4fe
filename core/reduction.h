// How a reduce or a reducing collective (all_reduce, reduce_scatter)
// combines values. Switches over it name every kind, so a new reduction
// does not compile until each consumer handles it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace thunky {

// mean folds as sum, and the sum is divided by the count of values when
// stored (reduction_finish): in double, rounded once, as ncclAvg on floats.
enum class Reduction { sum, prod, min, max, mean };

std::string_view reduction_name(Reduction r);
// The reduction named `name`, or none.
std::optional<Reduction> parse_reduction(std::string_view name);
// The value a reduction starts from: its identity (inf and -inf for min and max).
double reduction_identity(Reduction r);
// a combined with b, in double.
double reduce_values(Reduction r, double a, double b);
// The stored value of a fold `acc` of `n` values: acc / n for mean, else acc.
double reduction_finish(Reduction r, double acc, int64_t n);
// Whether a reduction is defined on integers and bool (mean is not:
// thunky does not pick a rounding for an integer mean).
bool reduction_takes_integers(Reduction r);
// argmax (max) and argmin (min): whether `v` takes the place of `best`,
// the value at a lower index: strictly greater (less), or a NaN over a
// number, so that the first extreme wins and the first NaN beats all, as
// in JAX. Never for sum and prod, which have no argument form.
bool arg_beats(Reduction r, double v, double best);

}  // namespace thunky
