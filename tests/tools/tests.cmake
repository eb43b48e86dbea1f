# Tools driven through the `nemotron` command (included from the top-level CMakeLists).
# convert: dense f32 -> every published format is byte for byte what synth writes directly.
add_test(NAME tools_convert_cli
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/tools/test_convert_cli.py $<TARGET_FILE:nemotron>)
set_tests_properties(tools_convert_cli PROPERTIES LABELS tools TIMEOUT 300)
# tokenizer train / encode / decode: the decoded stream is the input bytes.
add_test(NAME tools_tokenizer_cli
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/tools/test_tokenizer_cli.py $<TARGET_FILE:nemotron>)
set_tests_properties(tools_tokenizer_cli PROPERTIES LABELS tools TIMEOUT 120)
