# Start-up benchmark (not part of ctest): build/bench_startup [ROUNDS] [PYTHON]
add_executable(bench_startup ${CMAKE_SOURCE_DIR}/bench/startup.c)
target_compile_definitions(bench_startup PRIVATE TR_RUN_RECIPE_PATH="$<TARGET_FILE:run_recipe>")
add_dependencies(bench_startup run_recipe)
