# Extra text-layer targets and cross-check tests (included from the top-level CMakeLists).
set(_text_dir ${CMAKE_CURRENT_SOURCE_DIR}/tests/text)
add_executable(nemotron_text_tool ${_text_dir}/tools/text_tool.cpp)
target_link_libraries(nemotron_text_tool PRIVATE nemotron_text)

# Real tokenizers (npm test deps) vs the JS reference: identical ids, round trip.
add_test(NAME text_tokenizer_vs_js
         COMMAND /usr/bin/python3 ${_text_dir}/run_tokenizer_xcheck.py
                 --tool $<TARGET_FILE:nemotron_text_tool> --work ${CMAKE_CURRENT_BINARY_DIR}/text_xcheck)
set_tests_properties(text_tokenizer_vs_js PROPERTIES LABELS "text;xcheck" TIMEOUT 600)

# Both Nemotron chat templates (shared/data/chat_templates) vs Python Jinja2, byte for byte.
add_test(NAME text_template_vs_jinja2
         COMMAND /usr/bin/python3 ${_text_dir}/run_template_xcheck.py
                 --tool $<TARGET_FILE:nemotron_text_tool> --work ${CMAKE_CURRENT_BINARY_DIR}/text_template_xcheck)
set_tests_properties(text_template_vs_jinja2 PROPERTIES LABELS "text;xcheck" TIMEOUT 300
                     ENVIRONMENT "NEMOTRON_SHARED_DIR=${CMAKE_CURRENT_SOURCE_DIR}/../shared")

# libFuzzer binaries (clang only): cmake -DCMAKE_CXX_COMPILER=clang++ -DNEMOTRON_TEXT_FUZZ=ON
# then e.g. ./fuzz_text_tokenizer_roundtrip -max_total_time=60. The same targets run as a
# plain gtest over random inputs in test_text (tests/text/test_fuzz.cpp).
option(NEMOTRON_TEXT_FUZZ "Build libFuzzer targets for the text layer (clang)" OFF)
if(NEMOTRON_TEXT_FUZZ)
  file(GLOB _text_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/text/*.cpp
       ${CMAKE_CURRENT_SOURCE_DIR}/src/text/*/*.cpp)
  # Instrumented copy of the text layer, shared by the fuzz binaries.
  add_library(nemotron_text_fuzzobj OBJECT ${_text_dir}/fuzz_targets.cpp ${_text_srcs})
  target_include_directories(nemotron_text_fuzzobj PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(nemotron_text_fuzzobj PRIVATE nemotron_io PkgConfig::PCRE2)
  target_compile_options(nemotron_text_fuzzobj PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  foreach(_t tokenizer_roundtrip template_engine output_parser)
    add_executable(fuzz_text_${_t} ${_text_dir}/fuzz/fuzz_main.cpp $<TARGET_OBJECTS:nemotron_text_fuzzobj>)
    target_link_libraries(fuzz_text_${_t} PRIVATE nemotron_io PkgConfig::PCRE2)
    target_compile_definitions(fuzz_text_${_t} PRIVATE NEMO_FUZZ_TARGET=${_t})
    target_compile_options(fuzz_text_${_t} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_text_${_t} PRIVATE -fsanitize=fuzzer,address,undefined)
  endforeach()
endif()
