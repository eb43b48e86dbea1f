add_test(NAME memory_mapped_not_copied
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/model/check_rss.sh $<TARGET_FILE:nemotron>)
set_tests_properties(memory_mapped_not_copied PROPERTIES LABELS slow TIMEOUT 600)
