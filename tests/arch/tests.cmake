# The house as drawn (label "unit", so also under the sanitizers): every #include obeys the
# include-rule table of docs/architecture.md, and that table is a layering.
tr_harness_test(test_include_rules test_include_rules unit 60
                ${CMAKE_SOURCE_DIR}/tests/arch/test_include_rules.c)
# No two source files of the libraries and front ends call each other through any chain (nm over
# this build's object files; tests are not scanned).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME arch_call_circles
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/arch/call_circles.py
                   ${CMAKE_BINARY_DIR})
  set_tests_properties(arch_call_circles PROPERTIES LABELS "unit" TIMEOUT 120)
endif()
