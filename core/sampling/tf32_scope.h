// TF32 for fp32 matrix products (torch.backends.cuda.matmul.allow_tf32) while alive; the
// process-wide setting is put back afterwards, so other pipelines keep theirs.
#pragma once

#include <ATen/Context.h>

namespace varscope {

class Tf32Scope {
  public:
    explicit Tf32Scope(bool on) : active_(on) {
        if (!active_) return;
        before_ = at::globalContext().allowTF32CuBLAS();
        at::globalContext().setAllowTF32CuBLAS(true);
    }
    ~Tf32Scope() {
        if (active_) at::globalContext().setAllowTF32CuBLAS(before_);
    }
    Tf32Scope(const Tf32Scope&) = delete;
    Tf32Scope& operator=(const Tf32Scope&) = delete;

  private:
    bool active_ = false;
    bool before_ = false;
};

}  // namespace varscope
