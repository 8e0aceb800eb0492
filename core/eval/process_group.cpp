#include "core/eval/process_group.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace varscope {
namespace {

class SingleProcess final : public ProcessGroup {
  public:
    int rank() const override { return 0; }
    int world_size() const override { return 1; }
    std::vector<std::string> gather_to_root(const std::string&,
                                            const std::string& payload) override {
        return {payload};
    }
    void fail(const std::string&, const std::string&) override {}
};

// c10's messages carry a C++ backtrace after the first line: the user needs the first.
std::string message_of(const std::exception& e) {
    if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
    return e.what();
}

std::vector<uint8_t> bytes_of(const std::string& s) {
    return {s.begin(), s.end()};
}

// Each rank's answer is one key, "<prefix><tag>/<rank>": 'O' + payload, or 'F' + why.
class StoreGroup final : public ProcessGroup {
  public:
    StoreGroup(const DistributedSpec& spec, c10::intrusive_ptr<c10d::Store> store)
        : spec_(spec), store_(std::move(store)) {}
    int rank() const override { return spec_.rank; }
    int world_size() const override { return spec_.world_size; }

    std::vector<std::string> gather_to_root(const std::string& tag,
                                            const std::string& payload) override {
        if (spec_.rank != 0) {
            store_->set(key(tag, spec_.rank), bytes_of("O" + payload));
            return {};
        }
        std::vector<std::string> out{payload};
        const auto timeout =
            std::chrono::milliseconds(static_cast<int64_t>(spec_.timeout_s * 1000));
        for (int r = 1; r < spec_.world_size; ++r) {
            try {
                store_->wait({key(tag, r)}, timeout);
            } catch (const std::exception& e) {
                throw RankError("rank " + std::to_string(r) + " of " +
                                std::to_string(spec_.world_size) + " sent no result within " +
                                std::to_string(static_cast<int64_t>(spec_.timeout_s)) +
                                " s (it died or hangs): the job failed; the shard files written "
                                "so far are kept and a restart resumes from them (" +
                                message_of(e) + ")");
            }
            const auto v = store_->get(key(tag, r));
            std::string s(v.begin(), v.end());
            if (s.empty() || s[0] != 'O')
                throw RankError("rank " + std::to_string(r) + " failed: " +
                                (s.empty() ? std::string("(no message)") : s.substr(1)) +
                                " (the shard files written so far are kept; a restart resumes "
                                "from them)");
            out.push_back(s.substr(1));
        }
        return out;
    }

    void fail(const std::string& tag, const std::string& why) override {
        if (spec_.rank == 0) return;
        try {
            store_->set(key(tag, spec_.rank), bytes_of("F" + why));
        } catch (const std::exception&) {  // rank 0 is gone already: nothing to tell
        }
    }

  private:
    std::string key(const std::string& tag, int r) const {
        return spec_.key_prefix + tag + "/" + std::to_string(r);
    }
    DistributedSpec spec_;
    c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::unique_ptr<ProcessGroup> single_process_group() {
    return std::make_unique<SingleProcess>();
}

std::optional<DistributedSpec> distributed_spec_from(
    const std::function<const char*(const char*)>& lookup) {
    const char* rank = lookup("RANK");
    const char* world = lookup("WORLD_SIZE");
    if (!rank && !world) return std::nullopt;
    auto integer = [&](const char* name, const char* v, int lo, int hi) {
        if (!v) throw std::invalid_argument(std::string(name) + " is not set (set by torchrun)");
        char* end = nullptr;
        errno = 0;
        const long x = std::strtol(v, &end, 10);
        if (errno || end == v || *end || x < lo || x > hi)
            throw std::invalid_argument(std::string(name) + "='" + v +
                                        "': expected an integer in [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "]");
        return static_cast<int>(x);
    };
    DistributedSpec s;
    s.world_size = integer("WORLD_SIZE", world, 1, 1 << 20);
    s.rank = integer("RANK", rank, 0, s.world_size - 1);
    if (s.world_size > 1) {
        const char* addr = lookup("MASTER_ADDR");
        if (!addr || !*addr)
            throw std::invalid_argument("MASTER_ADDR is not set (set by torchrun)");
        s.master_addr = addr;
        s.master_port = integer("MASTER_PORT", lookup("MASTER_PORT"), 1, 65535);
    }
    const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
    s.agent_store = agent && std::string(agent) == "True";
    const char* restart = lookup("TORCHELASTIC_RESTART_COUNT");
    s.key_prefix = std::string("varscope_eval/") + (restart ? restart : "0") + "/";
    return s;
}

std::unique_ptr<ProcessGroup> tcp_store_group(const DistributedSpec& spec) {
    if (spec.world_size < 1 || spec.rank < 0 || spec.rank >= spec.world_size)
        throw std::invalid_argument("distributed: rank " + std::to_string(spec.rank) +
                                    " is outside world size " + std::to_string(spec.world_size));
    if (spec.master_port < 1 || spec.master_port > 65535)
        throw std::invalid_argument("distributed: MASTER_PORT " + std::to_string(spec.master_port) +
                                    " is not a port");
    if (spec.world_size == 1) return single_process_group();
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(spec.master_port);
    o.isServer = spec.rank == 0 && !spec.agent_store;
    o.numWorkers = spec.agent_store ? std::nullopt : std::optional<size_t>(spec.world_size);
    o.waitWorkers = false;
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(spec.timeout_s * 1000));
    try {
        auto store = c10::make_intrusive<c10d::TCPStore>(spec.master_addr, o);
        return std::make_unique<StoreGroup>(spec, store);
    } catch (const std::exception& e) {
        throw RankError("rank " + std::to_string(spec.rank) + ": no rendezvous at " +
                        spec.master_addr + ":" + std::to_string(spec.master_port) + ": " +
                        message_of(e));
    }
}

}  // namespace varscope
