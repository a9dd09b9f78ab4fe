#include "core/expr.h"

#include <gtest/gtest.h>

#include "core/status.h"

namespace thunky {
namespace {

int64_t eval(const std::string& s, int64_t x = 0) {
  return eval_int(*parse_expr(s), [&](std::string_view n) -> std::optional<int64_t> {
    if (n == "x") return x;
    return std::nullopt;
  });
}

TEST(Expr, PythonFloorSemantics) {
  EXPECT_EQ(eval("-7 // 2"), -4);
  EXPECT_EQ(eval("-7 % 3"), 2);
  EXPECT_EQ(eval("7 % -3"), -2);
  EXPECT_EQ(eval("(x - 3) % 4", 1), 2);  // (1 - 3) mod 4 = 2, not -2
}

TEST(Expr, PrecedenceAndFunctions) {
  EXPECT_EQ(eval("2 + 3 * 4"), 14);
  EXPECT_EQ(eval("(2 + 3) * 4"), 20);
  EXPECT_EQ(eval("min(x, 3) + max(1, 2)", 5), 5);
  EXPECT_EQ(eval("-x + 10", 4), 6);
}

TEST(Expr, ErrorsAreThrownNotCrashes) {
  EXPECT_THROW(parse_expr("1 +"), ThunkyError);
  EXPECT_THROW(parse_expr("(1"), ThunkyError);
  EXPECT_THROW(parse_expr("1 $ 2"), ThunkyError);
  EXPECT_THROW(eval("y"), ThunkyError);       // unknown name
  EXPECT_THROW(eval("1 // 0"), ThunkyError);  // division by zero
  EXPECT_THROW(eval("9223372036854775807 + 1"), ThunkyError);
  EXPECT_THROW(parse_expr(std::string(500, '(') + "1" + std::string(500, ')')), ThunkyError);  // depth limit
}

TEST(Expr, MapExpressionsParse) {
  for (const char* s : {"sin(x) * 2.0 + y", "n // 2", "3 * n + 1", "(n % 2) == 0", "i > 0", "where(a > 0, a, -a)",
                        "not (a and b) or c", "x ** 2 * 3", "f32(n) / 2.5e-1"})
    EXPECT_NO_THROW(parse_expr(s)) << s;
  EXPECT_EQ(to_string(*parse_expr("x ** 2 * 3")), "((x ** 2) * 3)");
  EXPECT_EQ(to_string(*parse_expr("-x ** 2")), "(-(x ** 2))");
}

TEST(Expr, RepeatedSubexpressionsReadAndEvaluateAsWritten) {
  // x and 8 recur; 08 is kept as written.
  const ExprPtr e = parse_expr("(x + 8) * (x + 8) + 08");
  EXPECT_EQ(to_string(*e), "(((x + 8) * (x + 8)) + 08)");
  EXPECT_EQ(eval("(x + 8) * (x + 8) + 08", 1), 89);  // 9 * 9 + 8
  EXPECT_EQ(eval("(x + 8) * (x + 8) + 08", -8), 8);  // 0 * 0 + 8
}

}  // namespace
}  // namespace thunky
