#include "core/training/train_common.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <stdexcept>

#include "core/io/atomic_file.h"
#include "core/io/checkpoint.h"
#include "core/io/json_fields.h"
#include "core/io/json_read.h"
#include "core/io/module_binding.h"
#include "core/io/quant_int8.h"
#include "core/pipeline.h"  // parse_device

namespace fs = std::filesystem;

namespace varscope {

nlohmann::json TrainConfig::to_json() const {
    return {{"steps", steps},
            {"batch", batch},
            {"lr", lr},
            {"weight_decay", weight_decay},
            {"warmup", warmup},
            {"log_every", log_every},
            {"checkpoint_every", checkpoint_every},
            {"seed", seed},
            {"device", device},
            {"max_seconds", max_seconds}};
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
    TrainConfig c;
    if (!j.is_object()) throw std::invalid_argument("train config: expected a JSON object");
    require_known_fields(j, c.to_json(), "train config");
    auto get = [&](const char* k, auto& v) { read_json_field(j, k, v, "train config: "); };
    get("steps", c.steps);
    get("batch", c.batch);
    get("lr", c.lr);
    get("weight_decay", c.weight_decay);
    get("warmup", c.warmup);
    get("log_every", c.log_every);
    get("checkpoint_every", c.checkpoint_every);
    get("seed", c.seed);
    get("device", c.device);
    get("max_seconds", c.max_seconds);
    auto need = [](bool ok, const char* msg) {
        if (!ok) throw std::invalid_argument(std::string("train config: ") + msg);
    };
    need(c.steps >= 1, "'steps' must be >= 1");
    need(c.batch >= 1 && c.batch <= 65536, "'batch' must be in [1, 65536]");
    need(c.lr > 0 && c.lr < 1, "'lr' must be in (0, 1)");
    need(c.weight_decay >= 0, "'weight_decay' must be >= 0");
    need(c.warmup >= 0, "'warmup' must be >= 0");
    need(c.max_seconds >= 0, "'max_seconds' must be >= 0");
    need(c.log_every >= 1 && c.checkpoint_every >= 1,
         "'log_every' and 'checkpoint_every' must be >= 1");
    return c;
}

double TrainConfig::lr_at(int64_t step) const {
    if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    const double t = static_cast<double>(step - warmup) / std::max<int64_t>(1, steps - warmup);
    return lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, t))));
}

at::Tensor ImageDataset::batch_images(const at::Tensor& rows) const {
    return images.index_select(0, rows.to(images.device())).to(at::kFloat).div(127.5).sub(1.0);
}

ImageDataset load_image_dataset(const std::string& path, const at::Device& device) {
    StateDict d = load_checkpoint(path);
    auto img = d.find("images"), lab = d.find("labels");
    if (img == d.end() || lab == d.end())
        throw std::invalid_argument(path +
                                    ": a packed data set needs 'images' and 'labels' tensors "
                                    "(make one with varscope-cli pack-emoji)");
    if (img->second.scalar_type() != at::kByte || img->second.dim() != 4 ||
        img->second.size(1) != 3)
        throw std::invalid_argument(path + ": 'images' must be uint8 (N, 3, H, W)");
    if (lab->second.dim() != 1 || lab->second.size(0) != img->second.size(0))
        throw std::invalid_argument(path + ": 'labels' must be (N) with N = number of images");
    ImageDataset ds;
    ds.images = img->second.to(device);
    ds.labels = lab->second.to(at::kLong).to(device);
    ds.num_classes = ds.labels.max().item<int64_t>() + 1;
    return ds;
}

ImageDataset prepare_training(const TrainConfig& train, const std::string& data_path) {
    // Checked first: without a GPU, the first copy to "cuda" (the default) failed with
    // LibTorch's "CUDA driver version is insufficient".
    at::Device device(at::kCPU);
    try {
        device = parse_device(train.device);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("train.device: ") + e.what() +
                                    " (train on the CPU with --device cpu)");
    }
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
    return load_image_dataset(data_path, device);
}

BatchSampler::BatchSampler(int64_t n, int64_t batch, uint64_t seed)
    : n_(n), batch_(std::min(batch, n)), seed_(seed) {
    if (n < 1) throw std::invalid_argument("BatchSampler: empty data set");
}

at::Tensor BatchSampler::next() {
    if (!perm_.defined() || pos_ + batch_ > n_) {
        if (perm_.defined()) ++epoch_;
        auto gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
        perm_ = at::randperm(n_, gen, at::kLong);
        pos_ = 0;
    }
    auto rows = perm_.narrow(0, pos_, batch_);
    pos_ += batch_;
    return rows;
}

at::Tensor BatchSampler::next_on(const at::Device& device) {
    const int64_t epoch_before = epoch_;
    const bool fresh = !perm_.defined();
    auto rows = next();
    if (device.is_cpu()) return rows;
    if (fresh || epoch_ != epoch_before || !perm_device_.defined()) perm_device_ = perm_.to(device);
    return perm_device_.narrow(0, pos_ - batch_, batch_);
}

RunDirectory::RunDirectory(std::string dir) : dir_(std::move(dir)) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_))
        throw std::invalid_argument("cannot create run folder '" + dir_ + "': " + ec.message());
}

std::string RunDirectory::path(const std::string& name) const {
    return (fs::path(dir_) / name).string();
}

namespace {

// The files of one checkpoint, written as "<name>.tmp" first (see RunDirectory::save).
constexpr const char* kCheckpointFiles[] = {"last.safetensors", "optimizer.pt"};

}  // namespace

void RunDirectory::settle_checkpoint() {
    nlohmann::json st;
    if (fs::exists(path("state.json"))) st = read_json_file(path("state.json"), path("state.json"));
    const bool pending = st.is_object() && st.value("pending_renames", false) == true;
    for (const char* n : kCheckpointFiles) {
        const std::string tmp = path(std::string(n) + ".tmp");
        if (!fs::exists(tmp)) continue;
        std::error_code ec;
        if (pending) {
            // The save committed (state.json names its step) but was stopped before this rename.
            fs::rename(tmp, path(n), ec);
            if (ec)
                throw FileWriteError("cannot move '" + tmp + "' to '" + path(n) +
                                     "': " + ec.message());
        } else {
            fs::remove(tmp, ec);  // a save that never committed: its files are not the state
        }
    }
    if (pending) {
        st.erase("pending_renames");
        write_file_atomic(path("state.json"), st.dump() + "\n");
    }
    // What a killed writer left (AtomicFileWriter's "<name>.tmp-<pid>-<n>"): one process
    // trains in a run folder, so none of them is being written now.
    std::error_code ec;
    std::vector<fs::path> stale;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const std::string name = e.path().filename().string();
        for (const char* prefix : {"last.safetensors.tmp", "optimizer.pt.tmp", "state.json.tmp"})
            if (name.rfind(prefix, 0) == 0) stale.push_back(e.path());
    }
    for (const auto& p : stale) fs::remove(p, ec);
}

int64_t RunDirectory::resume(torch::nn::Module& model, torch::optim::Optimizer& opt,
                             const std::string& what) {
    if (fs::exists(path("state.json")) &&
        !read_json_file(path("state.json"), path("state.json")).is_object())
        throw std::invalid_argument(path("state.json") +
                                    " is not a valid training state (needs \"step\": a whole "
                                    "number >= 0)");
    settle_checkpoint();
    if (!fs::exists(path("state.json"))) return 0;
    const nlohmann::json st = read_json_file(path("state.json"), path("state.json"));
    // A step below 0 ran the schedule backwards (negative learning rates) and said done.
    if (!st.is_object() || !st.contains("step") || !st["step"].is_number_integer() ||
        st["step"].get<int64_t>() < 0)
        throw std::invalid_argument(path("state.json") +
                                    " is not a valid training state (needs \"step\": a whole "
                                    "number >= 0)");
    const int64_t step = st["step"].get<int64_t>();
    // The weights name their step: a folder from a version that renamed the three files one
    // by one (and was stopped between them) would otherwise mix two checkpoints silently.
    const auto meta = read_safetensors_metadata(path("last.safetensors"));
    const auto saved = meta.find("varscope.step");
    if (saved != meta.end() && saved->second != std::to_string(step))
        throw CheckpointError(path("last.safetensors") + " holds step " + saved->second + " but " +
                              path("state.json") + " says step " + std::to_string(step) +
                              ": the run was stopped while saving; delete state.json to start "
                              "over");
    BindOptions o;
    o.what = what;
    bind_state_dict(model, load_checkpoint(path("last.safetensors")), o);
    try {
        torch::serialize::InputArchive ar;
        ar.load_from(path("optimizer.pt"));
        opt.load(ar);
    } catch (const c10::Error& e) {  // a truncated file gave miniz's words without the path
        throw CheckpointError(path("optimizer.pt") + ": cannot resume from it (" +
                              e.what_without_backtrace() + ")");
    }
    return step;
}

void RunDirectory::save(const torch::nn::Module& model, torch::optim::Optimizer& opt, int64_t step,
                        const nlohmann::json& model_config) {
    // A checkpoint is weights + optimizer state + step, which must agree. Each file is written
    // whole under "<name>.tmp" (AtomicFileWriter); then state.json, the commit, names the new
    // step with "pending_renames"; then the ".tmp" files are renamed into place and the flag
    // dropped. Stopped anywhere (SIGKILL, a full disk), resume() sees the previous checkpoint
    // (nothing committed: stray ".tmp" files are removed) or the new one (it finishes the
    // renames) — never a mixture.
    try {
        save_safetensors(
            module_state_dict(model), path("last.safetensors.tmp"),
            {{"varscope.config", model_config.dump()}, {"varscope.step", std::to_string(step)}});
        {
            torch::serialize::OutputArchive ar;
            opt.save(ar);
            // Streamed (a 2B model's Adam state is 16 GB). A write error is kept and thrown after
            // LibTorch's writer is done: thrown inside its callback, the writer's destructor would
            // write again and throw a second time (std::terminate).
            AtomicFileWriter file(path("optimizer.pt.tmp"));
            std::string failure;
            ar.save_to([&](const void* data, size_t n) -> size_t {
                if (failure.empty()) {
                    try {
                        file.write(data, n);
                    } catch (const FileWriteError& e) {
                        failure = e.what();
                    }
                }
                return n;
            });
            if (!failure.empty()) throw FileWriteError(failure);
            file.commit();
        }
        // The commit: once this file is whole, the new checkpoint is the state.
        write_file_atomic(path("state.json"),
                          nlohmann::json{{"step", step}, {"pending_renames", true}}.dump() + "\n");
    } catch (...) {  // a save that fails before its commit (a full disk) leaves no ".tmp" file
        std::error_code ec;
        for (const char* n : kCheckpointFiles) fs::remove(path(std::string(n) + ".tmp"), ec);
        throw;
    }
    settle_checkpoint();
}

void RunDirectory::log(const nlohmann::json& record) {
    // Appended, normally in one write(2) per record: a SIGKILL does not tear a line. A full
    // disk is an error naming the file, not a silently shorter log; the part of the line that
    // fitted is cut off again, so the log stays whole lines.
    const std::string line = record.dump() + "\n", file = path("log.jsonl");
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw FileWriteError("cannot append to '" + file + "': " + std::strerror(errno));
    struct stat before {};
    const bool sized = ::fstat(fd, &before) == 0;
    size_t done = 0;
    int err = 0;
    while (done < line.size()) {  // a short write is retried: the next one gives the reason
        const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            err = n < 0 ? errno : ENOSPC;
            break;
        }
        done += static_cast<size_t>(n);
    }
    if (err != 0 && done > 0 && sized) (void)!::ftruncate(fd, before.st_size);
    ::close(fd);
    if (err != 0) throw FileWriteError("cannot append to '" + file + "': " + std::strerror(err));
}

void export_half(const torch::nn::Module& model, const std::string& path,
                 const nlohmann::json& model_config, const std::vector<std::string>& drop,
                 const std::map<std::string, std::string>& extra_metadata, bool int8) {
    StateDict out;
    for (auto& [name, t] : module_state_dict(model)) {
        if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
        out[name] = t.is_floating_point() ? t.detach().to(at::kCPU, at::kHalf) : t.detach().cpu();
    }
    std::map<std::string, std::string> metadata = extra_metadata;
    metadata["varscope.config"] = model_config.dump();
    if (int8) {
        // Scales from the fp32 weights, not from their fp16 rounding.
        StateDict full;
        for (auto& [name, t] : module_state_dict(model))
            if (out.count(name)) full[name] = t.detach().cpu();
        std::string q;
        auto quantised = quantize_state_dict_int8(
            full,
            [](const std::string& n, const at::Tensor& t) { return is_large_2d_weight(n, t); },
            at::kHalf, q);
        // Take the int8 weights and their (new) scale tensors; everything else stays fp16.
        for (auto& [name, t] : quantised)
            if (!out.count(name) ||
                (t.scalar_type() == at::kChar && full[name].is_floating_point()))
                out[name] = t;
        metadata[kQuantMetadataKey] = q;
    }
    save_safetensors(out, path, metadata);
}

void set_learning_rate(torch::optim::Optimizer& opt, double lr) {
    for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

TimeBudget::TimeBudget(double seconds)
    : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}

double TimeBudget::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool TimeBudget::spent(int64_t step, std::ostream& out) {
    if (seconds_ <= 0 || elapsed() <= seconds_) return false;
    if (!reported_) out << "time budget of " << seconds_ << " s reached at step " << step << "\n";
    reported_ = true;
    return true;
}

double psnr_sum(const at::Tensor& rec, const at::Tensor& img) {
    return (rec - img)
        .div(2)
        .pow(2)
        .mean({1, 2, 3})
        .clamp_min(1e-10)
        .log10()
        .mul(-10)
        .sum()
        .item<double>();
}

double psnr_of_mse(double mse) {
    return 10 * std::log10(4.0 / std::max(mse, 1e-12));
}

}  // namespace varscope
