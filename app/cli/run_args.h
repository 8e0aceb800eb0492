// The flags of the commands written once against core's Runner (generate, compare,
// teacher-forward): the model (a checkpoint of any family, detected from its tensors; random
// weights of either family; or an embedded emoji model) and the sampling settings of every
// family, each family's own flags refused on another family's model.
#pragma once

#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/runner/batch_search.h"  // is_out_of_memory
#include "core/runner/runner.h"
#include "core/text/class_matcher.h"

namespace varscope::cli {

struct ModelArgs {
    std::string var_path, mar_path, infinity_path, vae_path;
    std::string t5_path;  // Infinity: the T5 encoder folder
    bool t5_offload = false;
    int64_t stream_blocks = 0;  // ModelSpec::kStreamBlocksAuto for "auto"
    std::string random;  // a VAR depth ("16"), a MAR config (mar_base | JSON), Infinity 2b | 8b
    // The embedded model when no checkpoint is given: "t2i" (or "infinity"), "var" | "mar";
    // "" = embedded_family()'s rule.
    std::string family;
    uint64_t init_seed = 0;
    std::vector<int64_t> patch_nums;
    std::string device = "cpu", precision = "fp32";
    std::string sampling_steps = "100";
    bool raw_weights = false;
    double memory_fraction = 1.0;  // CUDA: the caching allocator's share of the device

    // default_family: the embedded model without --family (generate: VAR; generate-mar: MAR).
    // A VAR default means "the embedded text-to-image model if it is shipped, else the VAR": see
    // embedded_family().
    void add_to(CLI::App& cmd, Family default_family);
    // Loads the model (CheckpointError / std::invalid_argument with a clear message) and refuses
    // the other family's model flags.
    std::unique_ptr<Runner> build() const;
    bool given(const std::string& flag) const;  // "--patch-nums": given on the command line
    // The family the flags point to before any file is read (--random's kind, --var / --mar,
    // --family): what --accel is checked against before the model loads.
    Family likely_family() const;
    // The embedded model used when no checkpoint is given: --family if given; MAR for the
    // MAR aliases; the class-conditional VAR when a class-only flag (--class, --more-smooth,
    // --patch-nums) asks for one; else the emoji text-to-image model when it is shipped
    // (embedded_t2i_available), else the VAR. The same rule for every command with a model.
    Family embedded_family() const;

  private:
    Family default_family_ = Family::Var;
    const CLI::App* cmd_ = nullptr;  // to see the sampling flags given with the model
    std::map<std::string, CLI::Option*> options_;
};

struct SampleArgs {
    std::vector<int64_t> classes;
    std::string prompt;
    int64_t batch = 1;
    uint64_t seed = 0;
    bool random_seed = false;
    double cfg = 0.0;  // unset: the family's default
    int64_t top_k = 900;
    double top_p = 0.95;
    bool more_smooth = false;
    std::string attention = "sdpa";
    bool no_cuda_graphs = false;
    bool no_memory_check = false;
    int64_t num_iter = 64;
    std::string cfg_schedule = "linear";
    double temperature = 1.0;
    int64_t head_cfg_period = 0;
    std::string text_features;  // Infinity
    double tau = 0.5;
    double h_div_w = 1.0;
    std::string pixels;  // "" = the model's own size (Runner::defaults)
    bool keep_unknown_words = false;

    void add_to(CLI::App& cmd);
    // Settings for `runner`: its family's defaults, the flags given, the model file's
    // recommendation for the flags not given (a note on stderr says which), a prompt matched
    // against the model's class names. Refuses the other family's flags. std::invalid_argument.
    SampleSettings resolve(const Runner& runner) const;
    // --accel (a file, inline JSON or a preset; "" = baseline) for `runner`'s family, with
    // --head-cfg-period folded into LazyMAR's config (it needs LazyMAR's condition cache).
    std::shared_ptr<const AccelPlan> accel(const Runner& runner, const std::string& arg) const;
    bool given(const std::string& flag) const;
    // Refuses settings whose memory estimate (Runner::estimate_memory) does not fit what the
    // device (or host) has free, naming the largest batch that does; --no-memory-check skips it.
    // std::invalid_argument. `accel`: the method that will run (AMS-KV's bounded cache needs
    // less), none = the baseline.
    void check_memory(const Runner& runner, const SampleSettings& s,
                      const AccelPlan* accel = nullptr) const;

  private:
    std::map<std::string, CLI::Option*> options_;
};

// What a user reads when the device ran out of memory mid-run: the batch, the estimate of the
// method that ran (`accel`; null: the baseline), what is free now and the largest batch that
// fits even at the method's most ("try --batch N"); for a method whose memory depends on the
// image (AMS-KV), also the batch its least would allow.
std::string out_of_memory_message(const Runner& runner, const SampleSettings& s,
                                  const std::string& what, const AccelPlan* accel = nullptr);
// Runs `f` (a command's sampling): an out-of-memory error (is_out_of_memory, the one classifier
// the bench's batch search uses too) becomes a std::runtime_error with out_of_memory_message
// (exit 3). Nothing has been written then: outputs follow the runs.
template <class F>
auto report_out_of_memory(const Runner& runner, const SampleSettings& s, const AccelPlan* accel,
                          F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
        throw std::runtime_error(out_of_memory_message(
            runner, s, c10_error ? c10_error->what_without_backtrace() : e.what(), accel));
    }
}

// A matcher over the class-name list that belongs to the model file (class_list_for); throws
// std::invalid_argument when there is none or its size is not the model's class count.
ClassMatcher class_matcher_for(const std::string& model_path, int64_t num_classes);
// The class a prompt names (class_matcher_for); prints the ranked matches to stderr.
int64_t class_for_prompt(const std::string& prompt, const std::string& model_path,
                         int64_t num_classes);

// "baseline, fastvar, ..." of both families, for help texts.
std::string all_preset_names();

}  // namespace varscope::cli
