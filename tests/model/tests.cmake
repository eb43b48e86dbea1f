# Weights are mapped, not copied. The bf16 full-width check (~1.5 GB checkpoint) is "slow": under
# ASan its synth alone takes 4 min on 2 cores, and its peak RSS would count ASan's shadow memory.
add_test(NAME memory_mapped_not_copied
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/model/check_rss.sh $<TARGET_FILE:nemotron>)
set_tests_properties(memory_mapped_not_copied PROPERTIES LABELS slow TIMEOUT 600)
# Only the pages a run reads are resident (~340 MB MoE checkpoint, ~25 s under ASan). A sanitizer
# build checks the file-backed checkpoint pages alone: its shadow memory and allocator quarantine
# are anonymous RSS the "nothing else copied" bound cannot allow for (check_rss_moe.py).
set(_rss_moe_flags)
if(NEMOTRON_SANITIZE)
  set(_rss_moe_flags --checkpoint-pages-only)
endif()
add_test(NAME memory_mapped_moe_pages
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/model/check_rss_moe.py
                 $<TARGET_FILE:nemotron> ${_rss_moe_flags})
set_tests_properties(memory_mapped_moe_pages PROPERTIES LABELS model TIMEOUT 600)
