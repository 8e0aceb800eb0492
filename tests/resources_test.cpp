// Where the shipped models are looked up: the environment, an installed copy, the build tree.
#include "core/resources.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using varscope::resolve_resource_dir;

TEST(ResourceDir, TheEnvironmentWinsUnlessEmpty) {
    EXPECT_EQ(resolve_resource_dir("/some/where", "/usr/bin/varscope", "/src/resources"),
              "/some/where");
    EXPECT_EQ(resolve_resource_dir("", "", "/src/resources"), "/src/resources");
    EXPECT_EQ(resolve_resource_dir(nullptr, "", "/src/resources"), "/src/resources");
}

TEST(ResourceDir, AnInstalledCopyUsesShareBesideItsBin) {
    varscope::testing::TempDir prefix;
    fs::create_directories(prefix.path() / "bin");
    const std::string exe = (prefix.path() / "bin" / "varscope-cli").string();
    std::ofstream(exe) << "";
    // No models installed yet: the build tree's folder.
    EXPECT_EQ(resolve_resource_dir(nullptr, exe, "/src/resources"), "/src/resources");
    fs::create_directories(prefix.path() / "share" / "varscope" / "models");
    EXPECT_EQ(fs::path(resolve_resource_dir(nullptr, exe, "/src/resources")),
              prefix.path() / "share" / "varscope");
    EXPECT_EQ(resolve_resource_dir("/env", exe, "/src/resources"), "/env");
}

TEST(ResourceDir, ThisTestBinaryFindsTheBuildTreesModels) {
    // The test runs from the build tree, where no share/varscope sits beside it.
    EXPECT_TRUE(fs::exists(fs::path(varscope::resource_dir()) / "models" / "emoji-var.safetensors"))
        << varscope::resource_dir();
}
