#include "core/load.h"

#include "core/files.h"
#include "core/lower.h"

namespace thunky {

Expected<Program> load_schedule_text(const std::string& text, const std::string& file, const ValidateOptions& opts) {
  Program p;
  try {
    p = parse_program_text(text, file);
    lower(p);
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{e.kind(), file, e.pointer(), e.what()}};
  } catch (const std::exception& e) {  // a safety net: never let a library exception escape
    return std::vector<Diagnostic>{{ErrorKind::input, file, "", std::string("cannot read the schedule: ") + e.what()}};
  }
  std::vector<Diagnostic> errors;
  try {
    errors = validate(p, opts);
  } catch (const ThunkyError& e) {
    errors = {{e.kind(), file, e.pointer(), e.what()}};
  } catch (const std::exception& e) {
    errors = {{ErrorKind::input, file, "", std::string("cannot validate the schedule: ") + e.what()}};
  }
  if (!errors.empty()) return errors;
  return p;
}

Expected<Program> load_schedule_file(const std::string& path, const ValidateOptions& opts) {
  // Read whole, with spare capacity past the text: the JSON parser reads
  // up to 64 bytes beyond it and so needs no padded copy of the file.
  std::string error;
  std::string text = read_input_file(path, error, 64);
  if (!error.empty()) return std::vector<Diagnostic>{{ErrorKind::input, path, "", "the schedule file " + error}};
  return load_schedule_text(text, path, opts);
}

}  // namespace thunky
