// NumPy's .npy arrays and .npz archives (a zip of .npy members), read strictly and written
// plainly (issue #34: FID reference statistics such as ADM's VIRTUAL_imagenet256_labeled.npz:
// arr_0, mu, sigma, mu_s, sigma_s). Data only: the header is parsed as the small literal
// numpy writes ({'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }), object arrays
// (pickles) are refused. The zip reader is our own: LibTorch's stream reader expects
// torch.save's one-folder layout, and an .npz member is read alone (a 2 GB arr_0 beside the
// statistics is never loaded unless asked for).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace varscope {

// A malformed or unsupported .npy/.npz; the message names the file, the member and what is wrong.
class NpyError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// One .npy file's bytes -> a CPU tensor (little-endian bool, u1, i1, i2, i4, i8, f2, f4, f8;
// Fortran order is turned into C order). `source` names it in errors.
at::Tensor parse_npy(const std::string& bytes, const std::string& source);
// Format 1.0 .npy bytes of a contiguous CPU copy of `t` (dtypes as above).
std::string npy_bytes(const at::Tensor& t);

// The member names of an .npz without ".npy" ("mu", "sigma", "arr_0").
std::vector<std::string> list_npz(const std::string& path);
// The member names of any zip archive as stored, in its central directory's order.
std::vector<std::string> list_zip(const std::string& path);
// The named arrays (all when `names` is empty); NpyError naming the file and the missing array.
// Members may be stored (np.savez) or deflated (np.savez_compressed, pytorch-fid's --save-stats).
std::map<std::string, at::Tensor> read_npz(const std::string& path,
                                           const std::vector<std::string>& names = {});
// np.savez's layout ("<name>.npy" members, stored), written atomically; NpyError over 4 GiB.
void write_npz(const std::map<std::string, at::Tensor>& arrays, const std::string& path);

// The npz archive's bytes (what write_npz writes), and the reader on bytes (for the fuzzer).
std::string npz_bytes(const std::map<std::string, at::Tensor>& arrays);
std::map<std::string, at::Tensor> parse_npz(const std::string& bytes, const std::string& source);

}  // namespace varscope
