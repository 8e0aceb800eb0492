#include "core/io/json_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>
#include <vector>

namespace varscope {

nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth) {
    using Event = nlohmann::json::parse_event_t;
    // The keys seen so far in each open object, innermost last.
    std::vector<std::unordered_set<std::string>> keys;
    const auto check = [&](int depth, Event event, nlohmann::json& parsed) {
        switch (event) {
            case Event::object_start:
            case Event::array_start:
                // `depth` counts the containers around this one.
                if (depth >= max_depth)
                    throw JsonReadError(what + ": JSON nested deeper than " +
                                        std::to_string(max_depth) + " levels");
                if (event == Event::object_start) keys.emplace_back();
                break;
            case Event::object_end:
                keys.pop_back();
                break;
            case Event::key: {
                const auto& k = parsed.get_ref<const std::string&>();
                if (!keys.back().insert(k).second)
                    throw JsonReadError(what + ": key '" + k + "' appears twice in one object");
                break;
            }
            default:
                break;
        }
        return true;
    };
    try {
        return nlohmann::json::parse(text.begin(), text.end(), check);
    } catch (const nlohmann::json::exception& e) {  // also numbers out of range (1e400)
        throw JsonReadError(what + " is not valid JSON: " + e.what());
    }
}

std::string read_regular_file(const std::string& path, const std::string& what,
                              uint64_t max_bytes) {
    // O_NONBLOCK: a FIFO opens at once (and is then refused) instead of waiting for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw JsonReadError(what + ": cannot open: " + std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw JsonReadError(what + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw JsonReadError(what + " is a folder, not a file");
    if (!S_ISREG(st.st_mode))
        throw JsonReadError(what + " is not a regular file (a FIFO, device or socket)");
    if (static_cast<uint64_t>(st.st_size) > max_bytes)
        throw JsonReadError(what + " is too large (" + std::to_string(st.st_size) +
                            " bytes, at most " + std::to_string(max_bytes) + ")");
    std::string out(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < out.size()) {
        const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw JsonReadError(what + ": read failed: " + std::strerror(errno));
        if (n == 0) break;  // shrank while we read
        got += static_cast<size_t>(n);
    }
    out.resize(got);
    return out;
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
    return parse_json(read_regular_file(path, what), what);
}

}  // namespace varscope
