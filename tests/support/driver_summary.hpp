#pragma once
// The accelerator driver families of a rendered collection, for one vendor,
// in one line: "up=0 state=not_loaded library=580.65.06 module= devices=2
// states=8" (states: how many series nodewatch_accelerator_driver_state
// has, one of them 1). "" when the vendor has none.

#include <regex>
#include <sstream>
#include <string>

namespace nodewatch::testing {

inline std::string DriverSummary(const std::string& text, const std::string& vendor) {
  const std::string v = "vendor=\"" + vendor + "\"";
  const std::regex up("^nodewatch_accelerator_driver_up\\{" + v + "\\} (\\S+)$");
  const std::regex state("^nodewatch_accelerator_driver_state\\{" + v +
                         ",state=\"([^\"]*)\"\\} (\\S+)$");
  const std::regex info("^nodewatch_accelerator_driver_info\\{" + v +
                        ",library_version=\"([^\"]*)\",kernel_module_version=\"([^\"]*)\"\\} 1$");
  const std::regex devices("^nodewatch_accelerator_driver_devices\\{" + v + "\\} (\\S+)$");
  std::string u, s, lib, mod, dev;
  int states = 0;
  bool any = false;
  std::istringstream in(text);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, up)) {
      u = m[1];
    } else if (std::regex_match(line, m, state)) {
      ++states;
      if (m[2] == "1") s += (s.empty() ? "" : ",") + m[1].str();
    } else if (std::regex_match(line, m, info)) {
      lib = m[1];
      mod = m[2];
    } else if (std::regex_match(line, m, devices)) {
      dev = m[1];
    } else {
      continue;
    }
    any = true;
  }
  if (!any) return "";
  return "up=" + u + " state=" + s + " library=" + lib + " module=" + mod + " devices=" + dev +
         " states=" + std::to_string(states);
}

}  // namespace nodewatch::testing
