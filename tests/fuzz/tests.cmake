# Fuzz harnesses for the override front ends. Always: replay executables that run the committed
# corpus plus a fixed-seed mutation loop (ctest label "fuzz"). With TRESTLE_FUZZ=ON and clang:
# real libFuzzer binaries fuzz_overrides / fuzz_yaml.
set(TRESTLE_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TRESTLE_FUZZ_MUTANTS 3000 CACHE STRING "Mutants per harness in the fuzz replay tests")

foreach(target overrides yaml)
  add_executable(fuzz_replay_${target} ${TRESTLE_FUZZ_DIR}/fuzz_${target}.c
                 ${TRESTLE_FUZZ_DIR}/replay_main.c)
  target_link_libraries(fuzz_replay_${target} PRIVATE trestle_config)
  add_test(NAME fuzz_replay_${target}
           COMMAND fuzz_replay_${target} ${TRESTLE_FUZZ_DIR}/corpus/${target}
                   --iterations ${TRESTLE_FUZZ_MUTANTS})
  set_tests_properties(fuzz_replay_${target} PROPERTIES LABELS "fuzz" TIMEOUT 300)
endforeach()

if(TRESTLE_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(WARNING "TRESTLE_FUZZ needs clang (libFuzzer); only the replay tests are built")
  else()
    # Coverage feedback needs the code under test instrumented, not only the harness.
    target_compile_options(trestle_config PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
    target_link_options(trestle_config INTERFACE -fsanitize=address,undefined)
    foreach(target overrides yaml)
      add_executable(fuzz_${target} ${TRESTLE_FUZZ_DIR}/fuzz_${target}.c)
      target_compile_options(fuzz_${target} PRIVATE -fsanitize=fuzzer,address,undefined)
      target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer,address,undefined)
      target_link_libraries(fuzz_${target} PRIVATE trestle_config)
    endforeach()
  endif()
endif()
