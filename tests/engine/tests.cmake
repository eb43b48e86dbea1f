add_test(NAME cli_end_to_end COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/engine/test_cli.py
                                     $<TARGET_FILE:nemotron>)
set_tests_properties(cli_end_to_end PROPERTIES LABELS engine TIMEOUT 600)
