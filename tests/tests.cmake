# Every tests/unit/<area>/test_*.c is one ctest executable linked against the whole stack.
# Areas with special needs (mpirun, CLI scripts, fuzz corpora) add tests/<area>/tests.cmake.
# tr_harness_test(TARGET TEST LABEL TIMEOUT SOURCE): one executable on tests/unit/harness.c, run
# as ctest TEST; the areas use it too. Every include names its file from the repository root.
function(tr_harness_test target test label timeout src)
  add_executable(${target} ${src} ${CMAKE_SOURCE_DIR}/tests/unit/harness.c)
  target_link_libraries(${target} PRIVATE trestle_runtime)
  target_compile_definitions(${target} PRIVATE TRESTLE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_test(NAME ${test} COMMAND ${target})
  set_tests_properties(${test} PROPERTIES LABELS "${label}" TIMEOUT ${timeout})
endfunction()
file(GLOB TRESTLE_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/*/test_*.c)
foreach(src ${TRESTLE_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  tr_harness_test(${name} ${name} unit 300 ${src})
endforeach()
# The areas' multi-rank tests: mpirun as root and oversubscribed (CI has 2 cores), followed by the
# rank count; one thread per rank. Open MPI's plugins are unloaded at finalize, so LeakSanitizer
# reports their allocations from "<unknown module>", which no suppression can name: leak checks
# are off under mpirun (the unit tests check our own code for leaks).
set(TR_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG})
set(TR_MPIRUN_ENV "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
if(TRESTLE_SANITIZE)
  list(APPEND TR_MPIRUN_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()
# tr_mpirun_test(TEST NP TARGET ARGS...): TARGET on NP ranks, label "mpi", never alongside other
# tests (oversubscribed ranks); mpirun fails if any rank does.
function(tr_mpirun_test test np target)
  add_test(NAME ${test}
           COMMAND ${TR_MPIRUN} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}>
                   ${MPIEXEC_POSTFLAGS} ${ARGN})
  set_tests_properties(${test} PROPERTIES LABELS "mpi" TIMEOUT 120 RUN_SERIAL TRUE
                       ENVIRONMENT "${TR_MPIRUN_ENV}")
endfunction()
file(GLOB TRESTLE_TEST_AREAS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*/tests.cmake)
foreach(f ${TRESTLE_TEST_AREAS})
  include(${f})
endforeach()
