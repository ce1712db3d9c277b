# bench_catalog: time of resolving recipes and of validating the whole catalog (docs/recipes.md).
add_executable(bench_catalog ${CMAKE_SOURCE_DIR}/bench/catalog.c)
target_link_libraries(bench_catalog PRIVATE trestle_config)
