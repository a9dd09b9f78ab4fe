// consumer SCHED BAD: predicts and runs SCHED through the installed API,
// then checks that BAD is refused as the tools refuse it.
#include <thunky/thunky.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) return std::cerr << "usage: consumer SCHED BAD\n", 64;
  auto predicted = thunky::api::simulate(argv[1], {.machine = "h100-8gpu"});
  if (!predicted) {
    for (const auto& e : predicted.errors) std::cerr << e << "\n";
    return 10;
  }
  auto measured = thunky::api::execute(argv[1]);
  if (!measured) {
    for (const auto& e : measured.errors) std::cerr << e << "\n";
    return 11;
  }
  auto bad = thunky::api::check(argv[2]);
  if (bad.exit_code != 2 || bad.errors.empty()) return std::cerr << "the bad schedule was not refused with exit 2\n", 12;
  std::cout << "predicted " << predicted.makespan_s << " measured " << measured.makespan_s << "\n" << bad.errors.front() << "\n";
  return predicted.makespan_s > 0 && measured.makespan_s > 0 && predicted.report_json.find("\"source\":\"sim\"") != std::string::npos ? 0 : 13;
}
