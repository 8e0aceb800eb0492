# Compiler set-up shared by every target: ccache, warnings, precompiled headers.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
    # PCH and ccache only cooperate with these sloppiness settings.
    set(_ccache ${CMAKE_COMMAND} -E env
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_ccache})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_ccache})
endif()

# varscope_warnings(<target>): -Wall -Wextra, optionally -Werror.
function(varscope_warnings target)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
    # GCC 13's -Wdangling-reference flags any reference returned from a call that took a
    # temporary (e.g. a json lookup by a string literal key), mostly false positives (GCC 14
    # narrowed it). The GPU machine has GCC 13; CI's GCC 12 has no such warning.
    target_compile_options(${target} PRIVATE
        $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,13>>:-Wno-dangling-reference>)
    if(VARSCOPE_WERROR)
        target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
    endif()
endfunction()
