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

# libFuzzer binaries of the text fuzz targets (tests/text/fuzz_targets.cpp): tests/fuzz/fuzz.cmake.
