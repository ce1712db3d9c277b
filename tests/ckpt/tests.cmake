# Checkpoint tests beyond the unit tests (label "ckpt"): the SIGKILL crash-safety driver and the
# trestle_ckpt tool's command-line behaviour.
add_executable(ckpt_kill ${CMAKE_SOURCE_DIR}/tests/ckpt/ckpt_kill.c)
target_link_libraries(ckpt_kill PRIVATE trestle_runtime)
add_test(NAME ckpt_kill COMMAND ckpt_kill 60 20261129)
set_tests_properties(ckpt_kill PROPERTIES LABELS "ckpt" TIMEOUT 120)

add_test(NAME ckpt_tool
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/ckpt/tool.sh $<TARGET_FILE:trestle_ckpt>
                 $<TARGET_FILE:ckpt_make_fixture>)
set_tests_properties(ckpt_tool PROPERTIES LABELS "ckpt" TIMEOUT 60)
add_executable(ckpt_make_fixture ${CMAKE_SOURCE_DIR}/tests/ckpt/make_fixture.c)
target_link_libraries(ckpt_make_fixture PRIVATE trestle_runtime)
