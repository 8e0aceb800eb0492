// RunDirectory's checkpoints under faults (issue #36): weights, optimizer state and step are
// one checkpoint. Killed at any point of a save (SIGKILL in a child), stopped at each step of
// the commit by hand, or out of disk, a resume continues from one whole checkpoint, the
// previous or the new one, never a mixture.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "core/io/json_read.h"
#include "core/training/train_common.h"
#include "tests/error_of.h"
#include "tests/fault_injection.h"
#include "tests/test_util.h"

namespace varscope {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

// A model whose weights say which step saved them (every value == step), with an Adam state
// that has taken exactly `step` steps.
struct Trainee {
    torch::nn::Linear net;
    torch::optim::Adam opt;
    explicit Trainee(int64_t width = 8)
        : net(torch::nn::LinearOptions(width, width)), opt(net->parameters()) {}

    void advance_to(int64_t step) {
        for (auto& p : net->parameters()) p.mutable_grad() = at::ones_like(p);
        opt.step();
        at::NoGradGuard no_grad;
        for (auto& p : net->parameters()) p.fill_(static_cast<double>(step));
    }
    // The step the weights were filled with; -1 when they disagree with each other.
    int64_t weights_step() const {
        const double v = net->weight.flatten()[0].item<double>();
        for (const auto& p : net->parameters())
            if (!at::equal(p, at::full_like(p, v))) return -1;
        return static_cast<int64_t>(v);
    }
    // How many steps Adam's state has taken (the same for every parameter).
    int64_t optimizer_steps() const {
        const auto& state = opt.state();
        const auto it = state.find(net->weight.unsafeGetTensorImpl());
        if (it == state.end()) return 0;
        return static_cast<const torch::optim::AdamParamState&>(*it->second).step();
    }
};

nlohmann::json config() {
    return {{"kind", "test"}};
}

void save_step(RunDirectory& run, Trainee& t, int64_t step) {
    t.advance_to(step);
    run.save(*t.net, t.opt, step, config());
}

// Resumes a fresh model from `dir`; checks that weights, optimizer and step agree.
int64_t resume_checked(const std::string& dir, int64_t width = 8) {
    RunDirectory run(dir);
    Trainee t(width);
    const int64_t step = run.resume(*t.net, t.opt, "test");
    EXPECT_EQ(t.weights_step(), step);
    EXPECT_EQ(t.optimizer_steps(), step);
    return step;
}

std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
}

TEST(TrainCheckpoint, KilledWhileSavingResumesFromAWholeCheckpoint) {
    // 1 MB of weights, 2 MB of Adam state: each save takes long enough (three files, fsync)
    // that kills land inside it and between its steps.
    constexpr int64_t kWidth = 512;
    TempDir dir;
    const std::string run_dir = dir.file("run");
    {
        RunDirectory run(run_dir);
        Trainee t(kWidth);
        save_step(run, t, 1);
    }
    std::mt19937 rng(36);
    int64_t last = 1;
    for (int round = 0; round < 8; ++round) {
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {  // resumes, then saves steps after it until killed
            testing::single_threaded_after_fork();
            RunDirectory run(run_dir);
            Trainee t(kWidth);
            for (int64_t step = run.resume(*t.net, t.opt, "test") + 1;; ++step)
                save_step(run, t, step);
        }
        ::usleep(20000 + rng() % 150000);
        ASSERT_EQ(::kill(child, SIGKILL), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        ASSERT_TRUE(WIFSIGNALED(status));
        int64_t step = -1;
        ASSERT_NO_THROW(step = resume_checked(run_dir, kWidth)) << "round " << round;
        EXPECT_GE(step, last) << "round " << round;
        last = step;
        for (const auto& n : names_in(run_dir))
            EXPECT_EQ(n.find(".tmp"), std::string::npos) << n << " left after resume";
    }
    EXPECT_GT(last, 1);  // the children did save between the kills
}

// Every point where a save can stop, made by hand from the files of two saves: before the
// commit the previous step is resumed (and the new ".tmp" files dropped), after it the new one
// (and the renames finished).
TEST(TrainCheckpoint, EachStopPointOfASaveResumesOneCheckpoint) {
    TempDir dir;
    const std::string a = dir.file("a"), b = dir.file("b");
    {
        RunDirectory ra(a), rb(b);
        Trainee t;
        save_step(ra, t, 1);
        save_step(rb, t, 2);
    }
    const auto state = [](int64_t step, bool pending) {
        nlohmann::json j{{"step", step}};
        if (pending) j["pending_renames"] = true;
        return j.dump() + "\n";
    };
    struct Stop {
        const char* what;
        bool weights_tmp, optimizer_tmp, weights_new, optimizer_new, committed;
        int64_t expected;
    };
    const Stop stops[] = {
        {"weights written", true, false, false, false, false, 1},
        {"optimizer written", true, true, false, false, false, 1},
        {"committed", true, true, false, false, true, 2},
        {"weights renamed", false, true, true, false, true, 2},
        {"both renamed", false, false, true, true, true, 2},
    };
    for (const Stop& s : stops) {
        const std::string run = dir.file(std::string("stop-") + s.what);
        fs::create_directory(run);
        const auto put = [&](const std::string& from_dir, const char* name, const std::string& as) {
            fs::copy_file(from_dir + "/" + name, run + "/" + as);
        };
        put(s.weights_new ? b : a, "last.safetensors", "last.safetensors");
        put(s.optimizer_new ? b : a, "optimizer.pt", "optimizer.pt");
        if (s.weights_tmp) put(b, "last.safetensors", "last.safetensors.tmp");
        if (s.optimizer_tmp) put(b, "optimizer.pt", "optimizer.pt.tmp");
        write_text(run + "/state.json", s.committed ? state(2, true) : state(1, false));
        EXPECT_EQ(resume_checked(run), s.expected) << s.what;
        EXPECT_EQ(names_in(run),
                  (std::vector<std::string>{"last.safetensors", "optimizer.pt", "state.json"}))
            << s.what;
        EXPECT_EQ(read_json_file(run + "/state.json", "state"),
                  nlohmann::json({{"step", s.expected}}))
            << s.what;
    }
    // A folder of a version that renamed the files one by one, stopped between two renames:
    // new weights, old step. Named, not mixed.
    const std::string mixed = dir.file("mixed");
    fs::create_directory(mixed);
    fs::copy_file(b + "/last.safetensors", mixed + "/last.safetensors");
    fs::copy_file(a + "/optimizer.pt", mixed + "/optimizer.pt");
    write_text(mixed + "/state.json", state(1, false));
    RunDirectory run(mixed);
    Trainee t;
    EXPECT_EQ(error_of<CheckpointError>([&] { run.resume(*t.net, t.opt, "test"); }),
              mixed + "/last.safetensors holds step 2 but " + mixed +
                  "/state.json says step 1: the run was stopped while saving; delete "
                  "state.json to start over");
}

// Out of disk while saving (RLIMIT_FSIZE in a child: in the optimizer state, then in the
// weights) and while logging: the error names the file, a failed save leaves no ".tmp" file,
// the previous checkpoint resumes, the log holds whole lines.
TEST(TrainCheckpoint, FullDiskKeepsThePreviousCheckpoint) {
    TempDir dir;
    const std::string run_dir = dir.file("run");
    {
        RunDirectory run(run_dir);
        Trainee t;
        save_step(run, t, 1);
        run.log({{"step", 1}});
    }
    const auto child = testing::run_in_child([&](std::string& report) {
        RunDirectory run(run_dir);
        Trainee t(256);                       // 256 KB of weights, 512 KB of Adam state
        testing::limit_file_size(400 << 10);  // the weights fit, the optimizer state does not
        report += error_of<FileWriteError>([&] { save_step(run, t, 2); }, "no error") + "\n";
        report += "after: " + std::to_string(names_in(run_dir).size()) + " files\n";
        testing::limit_file_size(64 << 10);
        report += error_of<FileWriteError>([&] { save_step(run, t, 3); }, "no error") + "\n";
        report += error_of<FileWriteError>(
            [&] {
                run.log({{"note", std::string(128 << 10, 'x')}});
            },
            "no error");
        return 0;
    });
    ASSERT_EQ(child.code, 0) << child.report;
    EXPECT_NE(child.report.find("cannot write '" + run_dir +
                                "/optimizer.pt.tmp' (write): File too large\nafter: 4 files\n"),
              std::string::npos)
        << child.report;
    EXPECT_NE(child.report.find("cannot write '" + run_dir +
                                "/last.safetensors.tmp' (write): File too large"),
              std::string::npos)
        << child.report;
    EXPECT_NE(child.report.find("cannot append to '" + run_dir + "/log.jsonl': File too large"),
              std::string::npos)
        << child.report;
    EXPECT_EQ(resume_checked(run_dir), 1);
    EXPECT_EQ(names_in(run_dir), (std::vector<std::string>{"last.safetensors", "log.jsonl",
                                                           "optimizer.pt", "state.json"}));
    std::ifstream log(run_dir + "/log.jsonl");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(log), {}), "{\"step\":1}\n");
}

}  // namespace
}  // namespace varscope
