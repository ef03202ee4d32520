// The tests' main(): the helper launcher (nodewatch/fs_helper.hpp) is forked
// first, while the test process has one thread, as nodewatchd's main()
// does; then GoogleTest runs.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "nodewatch/fs_helper.hpp"

int main(int argc, char** argv) {
  nodewatch::helper::launcher_entry(argc, argv);  // a replacement launcher stays there
  std::string err = nodewatch::helper::start_launcher();
  if (!err.empty())
    std::fprintf(stderr, "TEST SETUP: no helper launcher (%s): helper calls will fail\n",
                 err.c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
