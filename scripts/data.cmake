# JSONL -> Megatron indexed dataset (docs/data.md).
add_executable(preprocess_data ${CMAKE_SOURCE_DIR}/scripts/preprocess_data.c)
target_link_libraries(preprocess_data PRIVATE trestle_runtime)
