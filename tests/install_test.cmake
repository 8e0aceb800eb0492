# CTest (InstallLayout.InstalledCliUsesItsOwnModels): `cmake --install` into a fresh prefix puts
# the programs, the embedded models and the desktop entry where they belong, and the installed
# varscope-cli generates with the models under <prefix>/share/varscope, not the source tree's.
#   cmake -DBUILD_DIR=... -DPREFIX=... -DGUI=ON|OFF -P tests/install_test.cmake
foreach(v BUILD_DIR PREFIX GUI)
    if(NOT DEFINED ${v})
        message(FATAL_ERROR "pass -D${v}=...")
    endif()
endforeach()

file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}")
endif()

set(expected bin/varscope-cli share/varscope/imagenet-classes.json share/doc/VARScope/NOTICE.md)
foreach(m emoji-var emoji-vqvae emoji-mar emoji-klvae)
    list(APPEND expected share/varscope/models/${m}.safetensors)
endforeach()
list(APPEND expected share/varscope/models/emoji-classes.json share/varscope/models/MODEL_CARD.md)
if(GUI)
    list(APPEND expected bin/varscope share/applications/varscope.desktop
         share/icons/hicolor/scalable/apps/varscope.svg)
endif()
foreach(f IN LISTS expected)
    if(NOT EXISTS "${PREFIX}/${f}")
        message(FATAL_ERROR "not installed: ${PREFIX}/${f}")
    endif()
endforeach()

# The text-to-image model, when this tree ships it: all of it installed, and the CLI's default.
if(EXISTS "${PREFIX}/share/varscope/models/emoji-t2i-infinity.safetensors")
    foreach(f emoji-t2i-bsq-vae.safetensors emoji-t2i-t5/config.json
              emoji-t2i-t5/model.safetensors emoji-t2i-t5/spiece.model)
        if(NOT EXISTS "${PREFIX}/share/varscope/models/${f}")
            message(FATAL_ERROR "not installed: ${PREFIX}/share/varscope/models/${f}")
        endif()
    endforeach()
    execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=VARSCOPE_RESOURCES
                            "${PREFIX}/bin/varscope-cli" generate --prompt "red apple" --seed 0
                            --out "${PREFIX}/apple.ppm" --force
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    file(REAL_PATH "${PREFIX}/share/varscope/models/emoji-t2i-infinity.safetensors" t2i)
    string(FIND "${out}" "embedded emoji text-to-image model (${t2i}" at)
    if(NOT rc EQUAL 0 OR at EQUAL -1 OR NOT EXISTS "${PREFIX}/apple.ppm")
        message(FATAL_ERROR "the installed varscope-cli did not generate with ${t2i} (${rc}):\n${out}")
    endif()
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=VARSCOPE_RESOURCES
                        "${PREFIX}/bin/varscope-cli" generate --family var --prompt "red heart"
                        --seed 0 --out "${PREFIX}/heart.ppm" --force
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the installed varscope-cli failed (${rc}):\n${out}")
endif()
file(REAL_PATH "${PREFIX}/share/varscope/models/emoji-var.safetensors" model)
string(FIND "${out}" "using the embedded emoji VAR (${model})" at)
if(at EQUAL -1)
    message(FATAL_ERROR "the installed varscope-cli did not use ${model}:\n${out}")
endif()
if(NOT EXISTS "${PREFIX}/heart.ppm")
    message(FATAL_ERROR "no image written:\n${out}")
endif()
message(STATUS "installed to ${PREFIX}; the installed CLI generated with ${model}")
