// Writing generated images: PNG/JPEG through OpenCV where the build has it, and always the
// dependency-free PPM (8-bit RGB) and NPY (float32 CHW in [0, 1]) formats.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace varscope::cli {

// image: (3, H, W) float in [0, 1]. Refuses to overwrite unless `overwrite`; writes to a
// temporary file first and renames it, so a failed write never leaves a half-written file.
void write_image(const at::Tensor& image, const std::string& path, bool overwrite);
// "out.png", i, n -> "out.png" when n == 1, else "out_<i>.png".
std::string numbered_path(const std::string& path, int64_t i, int64_t n);
std::string supported_image_formats();
// The extension of the images a command names itself (compare's baseline, accelerated, diff):
// ".png" where the build has OpenCV, else ".ppm" (headless builds, e.g. the GPU machine).
std::string default_image_extension();

}  // namespace varscope::cli
