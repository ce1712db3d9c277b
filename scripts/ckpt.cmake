# trestle_ckpt: info / verify / can-load for checkpoints (docs/checkpoints.md), export / import
# to and from Hugging Face directories (docs/hf.md).
add_executable(trestle_ckpt ${CMAKE_SOURCE_DIR}/scripts/trestle_ckpt.c
               ${CMAKE_SOURCE_DIR}/scripts/ckpt_hf.c)
target_link_libraries(trestle_ckpt PRIVATE trestle_runtime)

# trestle_generate: text from a Hugging Face directory or a Trestle checkpoint with a KV cache
# (docs/hf.md, "Generation").
add_executable(trestle_generate ${CMAKE_SOURCE_DIR}/scripts/trestle_generate.c
               ${CMAKE_SOURCE_DIR}/scripts/ckpt_hf.c)
target_link_libraries(trestle_generate PRIVATE trestle_runtime)
