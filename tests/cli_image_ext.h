// The image format the CLI writes by default: PNG needs OpenCV, and builds without it (the GPU
// machine's, the sanitizer runs there) write PPM. Tests name image outputs with this extension.
#pragma once

#include <string>

#ifndef VARSCOPE_CLI_WRITES_PNG
#error "VARSCOPE_CLI_WRITES_PNG is set per source in tests/CMakeLists.txt: add this file there"
#endif

namespace varscope::testing {

inline std::string cli_image_ext() {
    return VARSCOPE_CLI_WRITES_PNG ? ".png" : ".ppm";
}

}  // namespace varscope::testing
