# Data-pipeline tests beyond the unit tests: fuzz harnesses replayed over their committed corpora
# (label "fuzz"). With -DTRESTLE_FUZZ=ON (clang) the same harnesses build as libFuzzer binaries
# fuzz_<name> for open-ended runs: ./fuzz_idx tests/data/fuzz/idx
set(TR_DATA_DIR ${CMAKE_SOURCE_DIR}/tests/data)

# The harnesses run under ASan + UBSan, and the runtime they call is instrumented for coverage
# (fuzzing only the harness's own lines would find nothing).
set(TR_DATA_LIBFUZZER OFF)
if(TRESTLE_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(TR_DATA_LIBFUZZER ON)
  target_compile_options(trestle_runtime PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(trestle_runtime INTERFACE -fsanitize=address,undefined)
endif()

function(tr_data_fuzz name)
  if(TR_DATA_LIBFUZZER)
    add_executable(fuzz_${name} ${TR_DATA_DIR}/fuzz_${name}.c)
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${name} PRIVATE trestle_runtime)
  endif()
  add_executable(fuzz_replay_${name} ${TR_DATA_DIR}/fuzz_${name}.c ${TR_DATA_DIR}/fuzz_replay.c)
  target_link_libraries(fuzz_replay_${name} PRIVATE trestle_runtime)
  add_test(NAME fuzz_replay_${name} COMMAND fuzz_replay_${name} ${ARGN})
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS "fuzz" TIMEOUT 120)
endfunction()

tr_data_fuzz(idx ${TR_DATA_DIR}/fuzz/idx --rounds=3000)
tr_data_fuzz(tokenizer_json ${TR_DATA_DIR}/fuzz/tokenizer_json --rounds=2000)
tr_data_fuzz(tokenizer_gpt2 ${TR_DATA_DIR}/fuzz/tokenizer_gpt2 --rounds=2000)
tr_data_fuzz(safetensors ${TR_DATA_DIR}/fuzz/safetensors --rounds=3000)
tr_data_fuzz(hf_index ${TR_DATA_DIR}/fuzz/hf_index --rounds=3000)
tr_data_fuzz(manifest ${TR_DATA_DIR}/fuzz/manifest --rounds=2000)
tr_data_fuzz(sft_jsonl ${TR_DATA_DIR}/fuzz/sft_jsonl --rounds=2000)
