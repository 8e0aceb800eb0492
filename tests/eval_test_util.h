// Helpers of the eval tests (eval_job_test, eval_process_group_test, cli_eval_test): a free
// loopback port for a c10d store, and the quality numbers of a result (timings differ between
// runs, so comparisons read these only).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace varscope::testing {

inline int free_port() {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
    ::close(s);
    return ntohs(a.sin_port);
}

inline nlohmann::json eval_quality(const nlohmann::json& result) {
    nlohmann::json q = nlohmann::json::array();
    for (const auto& c : result["configs"]) {
        nlohmann::json row = {{"name", c["name"]}, {"images", c["images"]}};
        for (const char* k : {"psnr_db", "ssim", "token_agreement"})
            if (c.contains(k)) row[k] = c[k];
        q.push_back(row);
    }
    return q;
}

}  // namespace varscope::testing
