add_test(NAME cli_end_to_end COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/engine/test_cli.py
                                     $<TARGET_FILE:nemotron>)
set_tests_properties(cli_end_to_end PROPERTIES LABELS engine TIMEOUT 600)
# Named models and the default model (a temporary models directory through NEMOTRON_MODELS).
add_test(NAME cli_models_dir COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/engine/test_models_cli.py
                                     $<TARGET_FILE:nemotron>)
set_tests_properties(cli_models_dir PROPERTIES LABELS engine TIMEOUT 300)
