# trestle_ckpt: info / verify / can-load for checkpoints (docs/checkpoints.md).
add_executable(trestle_ckpt ${CMAKE_SOURCE_DIR}/scripts/trestle_ckpt.c)
target_link_libraries(trestle_ckpt PRIVATE trestle_runtime)
