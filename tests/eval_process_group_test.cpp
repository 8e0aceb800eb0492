// core/eval/process_group.h: one process, and ranks talking through c10d's TCPStore (the
// other rank is a forked child that uses only the store).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "core/eval/process_group.h"
#include "tests/error_of.h"
#include "tests/eval_test_util.h"

namespace varscope {
namespace {

using testing::error_of;
using testing::free_port;

DistributedSpec spec(int rank, int port, double timeout_s = 30) {
    DistributedSpec s;
    s.rank = rank;
    s.world_size = 2;
    s.master_port = port;
    s.timeout_s = timeout_s;
    return s;
}

// Runs `child` as rank 1 in a forked process; returns its pid.
template <class F>
pid_t fork_rank1(F child) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        int code = 0;
        try {
            child();
        } catch (...) {
            code = 2;
        }
        ::_exit(code);
    }
    return pid;
}

int wait_exit(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(EvalProcessGroup, OneProcessGathersItsOwnPayload) {
    auto g = single_process_group();
    EXPECT_EQ(g->rank(), 0);
    EXPECT_EQ(g->world_size(), 1);
    EXPECT_EQ(g->gather_to_root("t", "abc"), (std::vector<std::string>{"abc"}));
}

TEST(EvalProcessGroup, SpecFromTheLauncherVariables) {
    std::map<std::string, std::string> env;
    auto lookup = [&](const char* k) -> const char* {
        const auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    EXPECT_FALSE(distributed_spec_from(lookup).has_value());  // not under torchrun
    env = {{"RANK", "1"},
           {"WORLD_SIZE", "4"},
           {"MASTER_ADDR", "node7"},
           {"MASTER_PORT", "29555"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
           {"TORCHELASTIC_RESTART_COUNT", "2"}};
    const auto s = distributed_spec_from(lookup);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->rank, 1);
    EXPECT_EQ(s->world_size, 4);
    EXPECT_EQ(s->master_addr, "node7");
    EXPECT_EQ(s->master_port, 29555);
    EXPECT_TRUE(s->agent_store);
    EXPECT_EQ(s->key_prefix, "varscope_eval/2/");
    env["RANK"] = "4";
    EXPECT_NE(
        error_of<std::invalid_argument>([&] { distributed_spec_from(lookup); }).find("RANK='4'"),
        std::string::npos);
    env["RANK"] = "0";
    env["MASTER_PORT"] = "http";
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  distributed_spec_from(lookup);
              }).find("MASTER_PORT='http'"),
              std::string::npos);
    env.erase("MASTER_ADDR");
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  distributed_spec_from(lookup);
              }).find("MASTER_ADDR is not set"),
              std::string::npos);
}

TEST(EvalProcessGroup, RankZeroGathersEveryRankInOrder) {
    const int port = free_port();
    const pid_t child = fork_rank1([&] {
        auto g = tcp_store_group(spec(1, port));
        if (!g->gather_to_root("a", "from one").empty()) ::_exit(3);
    });
    auto g = tcp_store_group(spec(0, port));
    EXPECT_EQ(g->rank(), 0);
    EXPECT_EQ(g->world_size(), 2);
    EXPECT_EQ(g->gather_to_root("a", "from zero"),
              (std::vector<std::string>{"from zero", "from one"}));
    EXPECT_EQ(wait_exit(child), 0);
}

TEST(EvalProcessGroup, AFailedRankIsNamedWithItsReason) {
    const int port = free_port();
    const pid_t child = fork_rank1([&] {
        auto g = tcp_store_group(spec(1, port));
        g->fail("a", "shard 3: out of memory");
    });
    auto g = tcp_store_group(spec(0, port));
    const std::string e = error_of<RankError>([&] { g->gather_to_root("a", "x"); });
    EXPECT_NE(e.find("rank 1 failed: shard 3: out of memory"), std::string::npos) << e;
    EXPECT_NE(e.find("restart resumes"), std::string::npos) << e;
    EXPECT_EQ(wait_exit(child), 0);
}

TEST(EvalProcessGroup, ARankThatSendsNothingFailsTheJobAfterTheTimeout) {
    const int port = free_port();
    const pid_t child = fork_rank1([&] {
        auto g = tcp_store_group(spec(1, port));
        ::usleep(3000000);  // dies without a word while rank 0 waits
    });
    auto g = tcp_store_group(spec(0, port, 1.0));
    const std::string e = error_of<RankError>([&] { g->gather_to_root("a", "x"); });
    EXPECT_NE(e.find("rank 1 of 2 sent no result within 1 s"), std::string::npos) << e;
    EXPECT_EQ(wait_exit(child), 0);
}

TEST(EvalProcessGroup, BadSpecsAreRefused) {
    DistributedSpec s = spec(2, 29500);
    EXPECT_NE(error_of<std::invalid_argument>([&] {
                  tcp_store_group(s);
              }).find("rank 2 is outside world size 2"),
              std::string::npos);
    s = spec(1, 0);
    EXPECT_NE(error_of<std::invalid_argument>([&] { tcp_store_group(s); }).find("MASTER_PORT 0"),
              std::string::npos);
}

}  // namespace
}  // namespace varscope
