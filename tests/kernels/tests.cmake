# The packed tiles' prefetches are in the object code (tests/kernels/check_prefetch.py): results
# cannot show a dropped prefetch, only speed can. Release builds only (what runs and is measured).
if(CMAKE_BUILD_TYPE STREQUAL "Release" AND NOT NEMOTRON_SANITIZE)
  add_test(NAME kernels_prefetch_emitted
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/kernels/check_prefetch.py
                   $<TARGET_FILE:nemotron_kernels>)
  set_tests_properties(kernels_prefetch_emitted PROPERTIES LABELS kernels TIMEOUT 120)
endif()
