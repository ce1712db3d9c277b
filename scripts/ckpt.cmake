# trestle_ckpt: info / verify / can-load for checkpoints (docs/checkpoints.md), export / import
# to and from Hugging Face directories (docs/hf.md).
add_executable(trestle_ckpt ${CMAKE_SOURCE_DIR}/scripts/trestle_ckpt.c
               ${CMAKE_SOURCE_DIR}/scripts/ckpt_hf.c)
target_link_libraries(trestle_ckpt PRIVATE trestle_runtime)
