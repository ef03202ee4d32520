#pragma once
// Where the build put what the tests run, and where the test sources are.
// Defined in one object the build generates (tests/CMakeLists.txt), never
// as compile definitions: an absolute path in a test's compile command made
// every test object miss the compiler cache in a clone in another folder.
// The macros keep the names the tests use.

namespace nodewatch::testing {
extern const char* const kFixturesDir;      // tests/fixtures
extern const char* const kTestsSourceDir;   // tests/
extern const char* const kNodewatchBinary;  // the nodewatchd built
extern const char* const kHangfs;           // tests/fakes/hangfs
extern const char* const kFakeNvmlLibrary;  // tests/fakes/fake_nvml, each flavour
extern const char* const kFakeNvmlOldLibrary;
extern const char* const kFakeNvmlBrokenLibrary;
extern const char* const kFakeIbverbsLibrary;  // tests/fakes/fake_ibverbs
extern const char* const kPodResourcesHelper;  // nwd-pod-resources
}  // namespace nodewatch::testing

#define NODEWATCH_FIXTURES_DIR ::nodewatch::testing::kFixturesDir
#define NODEWATCH_TESTS_SOURCE_DIR ::nodewatch::testing::kTestsSourceDir
#define NODEWATCH_BINARY ::nodewatch::testing::kNodewatchBinary
#define NODEWATCH_HANGFS ::nodewatch::testing::kHangfs
#define FAKE_NVML_LIBRARY ::nodewatch::testing::kFakeNvmlLibrary
#define FAKE_NVML_OLD_LIBRARY ::nodewatch::testing::kFakeNvmlOldLibrary
#define FAKE_NVML_BROKEN_LIBRARY ::nodewatch::testing::kFakeNvmlBrokenLibrary
#define FAKE_IBVERBS_LIBRARY ::nodewatch::testing::kFakeIbverbsLibrary
