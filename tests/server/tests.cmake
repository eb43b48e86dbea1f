# Server tests that drive `nemotron serve` from outside, as real clients do (included from the
# top-level CMakeLists). npm/apt test dependencies: scripts/install-server-test-deps.sh.
# A test exits 77 (SKIPPED, with a loud message) only when those dependencies are missing.
set(_server_dir ${CMAKE_CURRENT_SOURCE_DIR}/tests/server)
find_program(NEMOTRON_NODE node)
if(NEMOTRON_NODE)
  set(_node ${NEMOTRON_NODE})
else()
  set(_node /bin/sh -c "echo 'SKIPPED: node not found: run scripts/install-server-test-deps.sh'; exit 77" --)
endif()

# The unmodified OpenAI JS SDK: chat + completions, streamed and not, models, 400/401, tools, abort.
add_test(NAME server_openai_sdk COMMAND ${_node} ${_server_dir}/js/test_sdk.mjs $<TARGET_FILE:nemotron>)
# The chat page in headless Chromium (playwright-core): a reply with stats, an error, Stop.
add_test(NAME server_browser
         COMMAND ${_node} ${_server_dir}/test_browser.js $<TARGET_FILE:nemotron>
                 ${CMAKE_CURRENT_BINARY_DIR}/server_chat.png)
# The system curl: -i header parsing, -N streaming, hang-up mid-stream.
add_test(NAME server_curl COMMAND /usr/bin/python3 ${_server_dir}/test_curl.py $<TARGET_FILE:nemotron>)
set_tests_properties(server_openai_sdk server_browser server_curl PROPERTIES
                     LABELS server TIMEOUT 180 SKIP_RETURN_CODE 77)
# 8 streaming clients for 20 s, 20% hanging up mid-stream; the 300 s version is
# scripts/load_test.py --nemotron build/nemotron (docs/SERVER-TESTS.md). Alone: it measures RSS.
# Under ASan/UBSan the RSS bound is off: the allocator's quarantine grows by design.
set(_rss_bound 0.10)
if(NEMOTRON_SANITIZE)
  set(_rss_bound 100)
endif()
add_test(NAME server_load_short
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/load_test.py
                 --nemotron $<TARGET_FILE:nemotron> --clients 8 --seconds 20 --rss-growth ${_rss_bound})
set_tests_properties(server_load_short PROPERTIES LABELS server TIMEOUT 240 RUN_SERIAL TRUE)
# Every route, the SSE format, errors, auth, limits, disconnects and the drain, over loopback
# with the standard library only (tests/server/test_server.py).
add_test(NAME server_end_to_end COMMAND /usr/bin/python3 ${_server_dir}/test_server.py $<TARGET_FILE:nemotron>)
set_tests_properties(server_end_to_end PROPERTIES LABELS server TIMEOUT 300)
