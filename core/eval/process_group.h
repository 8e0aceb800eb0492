// How the ranks of a distributed eval job talk (issue #34): behind this small interface, so a
// single-process run needs nothing. The multi-process one is c10d's TCPStore from the torch
// wheel: the rendezvous torchrun sets up (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), and the
// gather of the ranks' shard results to rank 0. Those results are a few kilobytes of JSON per
// shard, so the store carries them; no collective backend is needed for them. (The wheel's
// ProcessGroupGloo cannot be compiled against: its header includes <gloo/...>, which the wheel
// does not ship; see docs/cli.md.)
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace varscope {

// A rank failed or did not answer in time; the message names the rank and says that a restart
// resumes from the shard files.
class RankError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class ProcessGroup {
  public:
    virtual ~ProcessGroup() = default;
    virtual int rank() const = 0;
    virtual int world_size() const = 0;
    // Every rank calls it once per `tag`: rank 0 gets every rank's `payload` in rank order,
    // the others get an empty list. A rank that reports failure instead (fail()) or sends
    // nothing within the timeout makes rank 0 throw RankError.
    virtual std::vector<std::string> gather_to_root(const std::string& tag,
                                                    const std::string& payload) = 0;
    // Tells rank 0 (waiting in gather_to_root(tag)) that this rank failed, with why.
    virtual void fail(const std::string& tag, const std::string& why) = 0;
};

// One process: rank 0 of 1.
std::unique_ptr<ProcessGroup> single_process_group();

// What torchrun (or srun with the same variables) tells each process; filled by the front end.
struct DistributedSpec {
    int rank = 0;
    int world_size = 1;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
    // torchrun's agent already serves the store on MASTER_PORT
    // (TORCHELASTIC_USE_AGENT_STORE=True): every rank is then a client.
    bool agent_store = false;
    std::string key_prefix = "varscope_eval/";  // e.g. with torchrun's restart count
    double timeout_s = 3600;                    // rendezvous and waiting for another rank
};

// The spec from the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT), read through `lookup` (the front
// end passes its environment lookup: core reads none itself). nullopt without RANK and WORLD_SIZE
// (not launched by torchrun); std::invalid_argument naming the variable when one is malformed.
std::optional<DistributedSpec> distributed_spec_from(
    const std::function<const char*(const char*)>& lookup);

// Connects through c10d::TCPStore (rank 0 serves it unless agent_store). RankError when the
// rendezvous fails (names the address and port).
std::unique_ptr<ProcessGroup> tcp_store_group(const DistributedSpec& spec);

}  // namespace varscope
