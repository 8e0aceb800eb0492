# Provides the imported target varscope::torch.
#
# Preferred source: the PyPI torch==2.11.0 wheel (packaging/setup.sh installs it into .venv).
# We do not call find_package(Torch) on the wheel because its Caffe2 config insists on a local
# CUDA toolkit whenever the wheel was built with CUDA, which a CPU-only CI machine lacks.
# Instead we build a small imported target from torch.utils.cmake_prefix_path's tree.
# An existing LibTorch can still be used through -DTorch_DIR=... (classic find_package route).

set(VARSCOPE_TORCH_HAS_CUDA OFF)
find_package(Threads REQUIRED)
if(Torch_DIR)
    find_package(Torch REQUIRED)
    add_library(varscope_torch INTERFACE)
    target_link_libraries(varscope_torch INTERFACE ${TORCH_LIBRARIES})
    if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
        set(VARSCOPE_TORCH_HAS_CUDA ON)
    endif()
    add_library(varscope::torch ALIAS varscope_torch)
    return()
endif()

if(NOT VARSCOPE_PYTHON)
    if(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
        set(VARSCOPE_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python")
    else()
        find_program(VARSCOPE_PYTHON NAMES python3 python REQUIRED)
    endif()
endif()

# Ask the wheel where it lives without importing torch (import pulls in CUDA libraries).
execute_process(
    COMMAND "${VARSCOPE_PYTHON}" -c
        "import importlib.util as u, os; s = u.find_spec('torch'); print(os.path.dirname(s.origin) if s else '')"
    OUTPUT_VARIABLE _torch_root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _torch_root OR NOT EXISTS "${_torch_root}/lib")
    message(FATAL_ERROR
        "VARScope: no torch found for ${VARSCOPE_PYTHON}.\n"
        "Run packaging/setup.sh (installs torch==2.11.0 into .venv) or pass -DTorch_DIR=<libtorch>/share/cmake/Torch.")
endif()
file(READ "${_torch_root}/version.py" _torch_version_py)
string(REGEX MATCH "__version__ = '([0-9.]+)" _m "${_torch_version_py}")
set(VARSCOPE_TORCH_VERSION "${CMAKE_MATCH_1}")
if(NOT VARSCOPE_TORCH_VERSION VERSION_EQUAL 2.11.0)
    message(WARNING "VARScope targets torch 2.11.0, found ${VARSCOPE_TORCH_VERSION} at ${_torch_root}")
endif()
set(VARSCOPE_TORCH_ROOT "${_torch_root}" CACHE INTERNAL "")

add_library(varscope_torch INTERFACE)
target_include_directories(varscope_torch SYSTEM INTERFACE
    "${_torch_root}/include" "${_torch_root}/include/torch/csrc/api/include")
target_compile_definitions(varscope_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
set(_libs "${_torch_root}/lib/libtorch_cpu.so" "${_torch_root}/lib/libc10.so")
if(EXISTS "${_torch_root}/lib/libtorch_cuda.so")
    # --no-as-needed: nothing references torch_cuda symbols directly, but loading it is what
    # registers the CUDA kernels and the CUDA device with the dispatcher.
    set(VARSCOPE_TORCH_HAS_CUDA ON)
    list(APPEND _libs "-Wl,--no-as-needed" "${_torch_root}/lib/libtorch_cuda.so"
         "${_torch_root}/lib/libc10_cuda.so" "-Wl,--as-needed")
    target_compile_definitions(varscope_torch INTERFACE VARSCOPE_TORCH_CUDA=1)
endif()
target_link_libraries(varscope_torch INTERFACE ${_libs} Threads::Threads)
target_link_options(varscope_torch INTERFACE "-Wl,-rpath,${_torch_root}/lib")
add_library(varscope::torch ALIAS varscope_torch)
message(STATUS "VARScope: LibTorch ${VARSCOPE_TORCH_VERSION} from ${_torch_root}")
