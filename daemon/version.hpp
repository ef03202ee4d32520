#pragma once

namespace nodewatch {
// The release and the source revision this binary was built from. Defined
// in version.cpp, which the build generates from version.cpp.in: a new
// revision recompiles that one file, not every file that prints it.
extern const char* const kVersion;
extern const char* const kRevision;
}  // namespace nodewatch
