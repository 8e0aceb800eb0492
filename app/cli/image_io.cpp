#include "app/cli/image_io.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "core/io/atomic_file.h"

#ifdef VARSCOPE_HAVE_OPENCV
#include <opencv2/imgcodecs.hpp>
#endif

namespace fs = std::filesystem;

namespace varscope::cli {
namespace {

std::string lower_ext(const std::string& path) {
    std::string e = fs::path(path).extension().string();
    for (auto& ch : e) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return e;
}

at::Tensor to_hwc_u8(const at::Tensor& chw) {
    return chw.to(at::kFloat)
        .cpu()
        .clamp(0, 1)
        .mul(255)
        .round()
        .to(at::kByte)
        .permute({1, 2, 0})
        .contiguous();
}

std::string ppm_bytes(const at::Tensor& hwc) {
    std::string out =
        "P6\n" + std::to_string(hwc.size(1)) + " " + std::to_string(hwc.size(0)) + "\n255\n";
    out.append(reinterpret_cast<const char*>(hwc.data_ptr<uint8_t>()),
               static_cast<size_t>(hwc.numel()));
    return out;
}

std::string npy_bytes(const at::Tensor& chw) {
    auto t = chw.to(at::kFloat).cpu().contiguous();
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(t.size(0)) + ", " + std::to_string(t.size(1)) + ", " +
                         std::to_string(t.size(2)) + "), }";
    // Pad so that magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::string out("\x93NUMPY\x01\x00", 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>(len >> 8);
    out += header;
    out.append(reinterpret_cast<const char*>(t.data_ptr<float>()),
               static_cast<size_t>(t.numel()) * 4);
    return out;
}

}  // namespace

std::string default_image_extension() {
#ifdef VARSCOPE_HAVE_OPENCV
    return ".png";
#else
    return ".ppm";
#endif
}

std::string supported_image_formats() {
#ifdef VARSCOPE_HAVE_OPENCV
    return ".png, .jpg, .ppm, .npy";
#else
    return ".ppm, .npy (this build has no OpenCV, so no .png)";
#endif
}

std::string numbered_path(const std::string& path, int64_t i, int64_t n) {
    if (n == 1) return path;
    fs::path p(path);
    return (p.parent_path() /
            (p.stem().string() + "_" + std::to_string(i) + p.extension().string()))
        .string();
}

void write_image(const at::Tensor& image, const std::string& path, bool overwrite) {
    if (image.dim() != 3 || image.size(0) != 3)
        throw std::invalid_argument("write_image: expected a (3, H, W) image");
    const fs::path p(path);
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    if (!fs::is_directory(dir))
        throw std::invalid_argument("output folder '" + dir.string() + "' does not exist");
    if (fs::exists(p) && !overwrite)
        throw std::invalid_argument("'" + path + "' exists; pass --force to overwrite it");
    const std::string ext = lower_ext(path);
    // Encoded in memory, then written through AtomicFileWriter: a full disk or a killed
    // process leaves the previous image whole and no temporary file (FileWriteError, exit 3).
    std::string bytes;
    if (ext == ".ppm") {
        bytes = ppm_bytes(to_hwc_u8(image));
    } else if (ext == ".npy") {
        bytes = npy_bytes(image);
#ifdef VARSCOPE_HAVE_OPENCV
    } else if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") {
        auto hwc = to_hwc_u8(image.flip(0));  // OpenCV wants BGR
        cv::Mat m(static_cast<int>(hwc.size(0)), static_cast<int>(hwc.size(1)), CV_8UC3,
                  hwc.data_ptr<uint8_t>());
        std::vector<uchar> encoded;
        if (!cv::imencode(ext == ".png" ? ".png" : ".jpg", m, encoded))
            throw std::runtime_error("OpenCV could not encode '" + path + "'");
        bytes.assign(encoded.begin(), encoded.end());
#endif
    } else {
        throw std::invalid_argument("unsupported image format '" + ext + "' for '" + path +
                                    "'; supported: " + supported_image_formats());
    }
    write_file_atomic(path, bytes);
}

}  // namespace varscope::cli
