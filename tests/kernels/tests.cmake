# The packed tiles' object code (tests/kernels/check_tile_code.py): prefetches present, no
# accumulator stored to the stack in the main loop. Results cannot show either, only speed can.
# Release builds only (what runs and is measured).
if(CMAKE_BUILD_TYPE STREQUAL "Release" AND NOT NEMOTRON_SANITIZE)
  add_test(NAME kernels_tile_code
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/kernels/check_tile_code.py
                   $<TARGET_FILE:nemotron_kernels>)
  set_tests_properties(kernels_tile_code PROPERTIES LABELS kernels TIMEOUT 120)
endif()
