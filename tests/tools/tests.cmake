# Tools driven through the `nemotron` command (included from the top-level CMakeLists).
# convert: dense f32 -> every published format is byte for byte what synth writes directly.
add_test(NAME tools_convert_cli
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/tools/test_convert_cli.py $<TARGET_FILE:nemotron>)
set_tests_properties(tools_convert_cli PROPERTIES LABELS tools TIMEOUT 300)
# tokenizer train / encode / decode: the decoded stream is the input bytes.
add_test(NAME tools_tokenizer_cli
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/tools/test_tokenizer_cli.py $<TARGET_FILE:nemotron>)
set_tests_properties(tools_tokenizer_cli PROPERTIES LABELS tools TIMEOUT 120)
# Corrupted copies of synthetic checkpoints (truncations, flipped header bytes, wrong dtypes and
# shapes, bad scales, broken shards and indexes, duplicate names): one clear error, exit 1, no
# crash, from `inspect` and `run`. Not "slow": the ASan stage runs it too.
add_test(NAME tools_corrupt_checkpoint
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/tools/test_corrupt_checkpoint.py $<TARGET_FILE:nemotron>)
set_tests_properties(tools_corrupt_checkpoint PROPERTIES LABELS "tools;badinput" TIMEOUT 900)
