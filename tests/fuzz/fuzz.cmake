# libFuzzer binaries, one per fuzz target (included from the top-level CMakeLists when
# NEMOTRON_FUZZ=ON, which also instruments every library: clang only). The targets live beside
# the tests of their layer (tests/io/fuzz_targets.cpp, tests/text/fuzz_targets.cpp), where gtest
# drivers run them too; each binary starts from its seed corpus in tests/fuzz/corpus/<target>/.
#   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DNEMOTRON_FUZZ=ON && ninja -C build-fuzz fuzz
#   scripts/fuzz.sh [seconds-per-target]
set(_fuzz_dir ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz)
set(NEMOTRON_FUZZ_TARGETS
    "safetensors_file:io" "config_json:io" "tokenizer_json:text" "tokenizer_roundtrip:text"
    "template_engine:text" "output_parser:text")
add_custom_target(fuzz)
foreach(_layer io text)  # each layer's targets compiled once, linked into each of its binaries
  add_library(nemotron_fuzz_${_layer} OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/tests/${_layer}/fuzz_targets.cpp)
  target_link_libraries(nemotron_fuzz_${_layer} PRIVATE nemotron_${_layer})
endforeach()
foreach(_entry ${NEMOTRON_FUZZ_TARGETS})
  string(REPLACE ":" ";" _parts ${_entry})
  list(GET _parts 0 _t)
  list(GET _parts 1 _layer)
  add_executable(fuzz_${_t} ${_fuzz_dir}/fuzz_main.cpp $<TARGET_OBJECTS:nemotron_fuzz_${_layer}>)
  target_link_libraries(fuzz_${_t} PRIVATE nemotron_${_layer})
  target_compile_definitions(fuzz_${_t} PRIVATE
    NEMO_FUZZ_HEADER="${CMAKE_CURRENT_SOURCE_DIR}/tests/${_layer}/fuzz_targets.h"
    NEMO_FUZZ_TARGET=nemo::${_layer}::fuzz::${_t})
  target_link_options(fuzz_${_t} PRIVATE -fsanitize=fuzzer)
  add_dependencies(fuzz fuzz_${_t})
endforeach()
