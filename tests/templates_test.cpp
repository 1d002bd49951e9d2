#include <gtest/gtest.h>

#include "mojo/error.hpp"
#include "mojo/templates.hpp"
#include "test_util.hpp"

using namespace mojo;

TEST(Templates, BuiltInTemplatesAreEmbedded) {
  TemplateRegistry reg;
  EXPECT_TRUE(reg.contains("rms_norm.cu"));
  EXPECT_TRUE(reg.contains("mojo_prelude.cuh"));
  EXPECT_EQ(reg.load("rms_norm.cu"), test::read_file(MOJO_TEST_TEMPLATE_DIR + "/rms_norm.cu"))
      << "the embedded copy is byte-identical to the source file";
  auto names = reg.list();
  EXPECT_NE(std::find(names.begin(), names.end(), "rms_norm.cu"), names.end());
}

TEST(Templates, ExpandInlinesThePreludeOnceWithLineMarkers) {
  TemplateRegistry reg;
  std::string tu = reg.expand("rms_norm.cu");
  EXPECT_EQ(tu.find("#include \"mojo_prelude.cuh\""), std::string::npos);
  EXPECT_NE(tu.find("#line 1 \"mojo_prelude.cuh\""), std::string::npos);
  EXPECT_NE(tu.find("#line 1 \"rms_norm.cu\""), std::string::npos);
  EXPECT_NE(tu.find("struct alignas(2) bf16"), std::string::npos);
  EXPECT_EQ(tu.find("#pragma once"), std::string::npos);
  EXPECT_EQ(tu.find('/' + std::string("work")), std::string::npos) << "no absolute paths";
}

TEST(Templates, SearchPathOverridesAndExtends) {
  test::TempDir dir;
  test::write_file(dir.path() / "my_op.cu", "#include \"mojo_prelude.cuh\"\n// mine\n");
  test::write_file(dir.path() / "rms_norm.cu", "// overridden\n");
  TemplateRegistry reg({dir.path()});
  EXPECT_EQ(reg.load("rms_norm.cu"), "// overridden\n");
  std::string tu = reg.expand("my_op.cu");
  EXPECT_NE(tu.find("// mine"), std::string::npos);
  EXPECT_NE(tu.find("namespace mojo"), std::string::npos) << "the embedded prelude is found from a user template";
}

TEST(Templates, EnvironmentSearchPath) {
  test::TempDir dir;
  test::write_file(dir.path() / "from_env.cu", "// env\n");
  test::ScopedEnv env("MOJO_JIT_TEMPLATE_PATH", (dir.str() + ":/nonexistent").c_str());
  TemplateRegistry reg;
  EXPECT_EQ(reg.load("from_env.cu"), "// env\n");
}

TEST(Templates, AddSearchPathAtRunTime) {
  test::TempDir dir;
  TemplateRegistry reg;
  EXPECT_FALSE(reg.contains("late.cu"));
  test::write_file(dir.path() / "late.cu", "// late\n");
  reg.add_search_path(dir.path());
  EXPECT_EQ(reg.load("late.cu"), "// late\n");
}

TEST(Templates, MissingTemplateAndIncludeSayWhere) {
  test::TempDir dir;
  test::write_file(dir.path() / "broken.cu", "// line 1\n#include \"nowhere.cuh\"\n");
  TemplateRegistry reg({dir.path()});
  std::string msg = test::error_of<TemplateNotFoundError>([&] { reg.load("absent.cu"); });
  EXPECT_NE(msg.find("no template 'absent.cu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
  msg = test::error_of<TemplateNotFoundError>([&] { reg.expand("broken.cu"); });
  EXPECT_NE(msg.find("broken.cu:2: includes \"nowhere.cuh\""), std::string::npos) << msg;
}

TEST(Templates, IncludeCycleInlinesEachFileOnce) {
  test::TempDir dir;
  test::write_file(dir.path() / "a.cuh", "#include \"b.cuh\"\n// from a\n");
  test::write_file(dir.path() / "b.cuh", "#include \"a.cuh\"\n// from b\n");
  TemplateRegistry reg({dir.path()});
  std::string tu = reg.expand("a.cuh");
  EXPECT_EQ(tu, "#line 1 \"a.cuh\"\n#line 1 \"b.cuh\"\n#line 2 \"b.cuh\"\n// from b\n#line 2 \"a.cuh\"\n// from a\n");
}

TEST(Templates, NamesCannotEscapeTheSearchPath) {
  TemplateRegistry reg;
  EXPECT_FALSE(reg.contains("../etc/passwd"));
  EXPECT_THROW(reg.load("../rms_norm.cu"), TemplateNotFoundError);
}
