# Config resolution benchmark (not part of ctest): build/bench_config_resolve [ITERS] [RECIPE...]
add_executable(bench_config_resolve ${CMAKE_SOURCE_DIR}/bench/config_resolve.c)
target_link_libraries(bench_config_resolve PRIVATE trestle_config)
target_compile_definitions(bench_config_resolve PRIVATE
                           TR_RUN_RECIPE_PATH="$<TARGET_FILE:run_recipe>")
add_dependencies(bench_config_resolve run_recipe)
