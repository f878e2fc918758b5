#include "lean/lean_args.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace maf_sandbox::cli::lean {
namespace {

std::optional<LeanArgs> parse(std::initializer_list<const char*> words) {
    std::vector<std::string> storage{"maf-sandbox"};
    storage.insert(storage.end(), words.begin(), words.end());
    std::vector<char*> argv;
    for (auto& word : storage) {
        argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    return parse_lean_args(static_cast<int>(storage.size()), argv.data());
}

TEST(LeanArgs, ReadsEveryFlagOfAWarmExecInBothSpellings) {
    const auto args = parse({"exec",       "--backend",
                             "local",      "--floor=container",
                             "--scope",    "s",
                             "--thread=t", "--agent",
                             "a",          "--kind",
                             "k",          "--image",
                             "img",        "--max-output",
                             "10",         "--timeout",
                             "1.5",        "--memory",
                             "1000",       "--pids",
                             "7",          "--disk=99",
                             "--egress",   "closed",
                             "--",         "ls",
                             "-l",         "--",
                             "x"});
    ASSERT_TRUE(args);
    EXPECT_EQ(args->command, "exec");
    EXPECT_EQ(args->floor, "container");
    EXPECT_EQ(args->scope, "s");
    EXPECT_EQ(args->thread, "t");
    EXPECT_EQ(args->agent, "a");
    EXPECT_EQ(args->kind, "k");
    EXPECT_EQ(args->image, "img");
    EXPECT_EQ(args->max_output, 10u);
    EXPECT_DOUBLE_EQ(args->timeout, 1.5);
    EXPECT_EQ(args->memory, 1000u);
    EXPECT_EQ(args->pids, 7u);
    EXPECT_EQ(args->disk, 99u);
    EXPECT_EQ(args->argv, (std::vector<std::string>{"ls", "-l", "--", "x"}));
}

TEST(LeanArgs, DefaultsMatchTheFullCli) {
    const auto args = parse({"run", "--", "true"});
    ASSERT_TRUE(args);
    EXPECT_EQ(args->floor, "microvm");
    EXPECT_EQ(args->image, "host");
    EXPECT_EQ(args->max_output, 1u << 20);
    EXPECT_DOUBLE_EQ(args->timeout, 60.0);
    EXPECT_FALSE(args->memory);
}

TEST(LeanArgs, HandsEverythingUnusualToTheFullCli) {
    EXPECT_FALSE(parse({"ls"}));
    EXPECT_FALSE(parse({"exec", "--scope", "s", "--thread", "t"}));          // no command
    EXPECT_FALSE(parse({"exec", "--scope", "s", "--", "true"}));             // no thread
    EXPECT_FALSE(parse({"exec", "--scope", "s", "--thread", "t", "true"}));  // no `--`
    EXPECT_FALSE(parse({"run", "--help", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--in", "a", "--", "true"}));     // files: full CLI
    EXPECT_FALSE(parse({"run", "--scope", "s", "--", "true"}));  // exec-only flag
    EXPECT_FALSE(parse({"run", "--backend", "acas", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--egress", "allowlist", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--max-output", "-5", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--max-output", "0", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--max-output", "1e3", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--timeout", "0", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--timeout", ".5", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--timeout", "1.", "--", "true"}));
    EXPECT_FALSE(parse({"run", "--image", "a", "--image", "b", "--", "true"}));  // given twice
    EXPECT_FALSE(parse({"run", "--image", "--", "true"}));                       // no value
    EXPECT_FALSE(parse({"run", "--image=", "--", "true"}));                      // empty value
    EXPECT_FALSE(parse({"run", "-h", "--", "true"}));
}

TEST(LeanArgs, TakesRepeatedEnvironmentFlagsAndHandsABadOneToTheFullCli) {
    const auto args = parse({"run", "-e", "A=1", "--env", "B=x=y", "--env=A=2", "--", "env"});
    ASSERT_TRUE(args);
    EXPECT_EQ(args->environment, (std::map<std::string, std::string>{{"A", "2"}, {"B", "x=y"}}));
    EXPECT_EQ(args->argv, std::vector<std::string>{"env"});
    EXPECT_FALSE(parse({"run", "-e", "1A=1", "--", "env"}));
    EXPECT_FALSE(parse({"run", "--env-file", "/nonexistent/maf-env-file", "--", "env"}));
    EXPECT_FALSE(parse({"run", "-e", "--", "env"}));
}

}  // namespace
}  // namespace maf_sandbox::cli::lean
