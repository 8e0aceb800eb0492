#include "app/cli/train_captions.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "core/data/emoji_classes.h"
#include "core/io/checkpoint.h"

namespace varscope::cli {
namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) {
        return c == '_' ? ' ' : static_cast<char>(std::tolower(c));
    });
    return s;
}

}  // namespace

std::vector<std::vector<std::string>> load_row_captions(const std::string& data_path,
                                                        const std::string& classes_path) {
    const StateDict d = load_checkpoint(data_path);
    const auto lab = d.find("labels");
    if (lab == d.end())
        throw std::invalid_argument(data_path + ": no 'labels' tensor (make it with pack-emoji)");
    const at::Tensor labels = lab->second.to(at::kLong).contiguous();
    at::Tensor styles;
    if (const auto st = d.find("styles"); st != d.end())
        styles = st->second.to(at::kLong).contiguous();
    const auto classes = load_class_list(classes_path);
    static const char* kStyle[] = {"noto emoji style", "twemoji style"};
    std::vector<std::vector<std::string>> out;
    for (int64_t i = 0; i < labels.numel(); ++i) {
        const int64_t c = labels.data_ptr<int64_t>()[i];
        if (c < 0 || c >= static_cast<int64_t>(classes.size()))
            throw std::invalid_argument(data_path + ": row " + std::to_string(i) + " has label " +
                                        std::to_string(c) + ", which " + classes_path +
                                        " does not list");
        const int64_t s = styles.defined() ? styles.data_ptr<int64_t>()[i] : -1;
        const std::string tail = s == 0 || s == 1 ? std::string(", ") + kStyle[s] : "";
        const ClassInfo& info = classes[static_cast<size_t>(c)];
        std::vector<std::string> caps{lower(info.name) + tail};
        if (!info.short_name.empty() && lower(info.short_name) != lower(info.name))
            caps.push_back(lower(info.short_name) + tail);
        out.push_back(std::move(caps));
    }
    return out;
}

}  // namespace varscope::cli
