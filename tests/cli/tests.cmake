# CLI tests: bash scripts that drive the built run_recipe (label "cli").
#   tests/cli/<name>.sh RUN_RECIPE SOURCE_DIR MPIEXEC
set(TR_CLI_TESTS dry_run precedence explain json_diagnostics errors roundtrip print_groups
    help_config recipes catalog catalog_ci print_schedule mb_runner dump_samples)
# Arguments (space-separated) that make validate() warn about llama32_1b_pretrain, nothing else.
set(TR_CLI_STRICT_WARNING "train.eval_iters=5")

set(TR_CLI_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
if(TRESTLE_SANITIZE)
  # Open MPI's allocations at finalize are reported as leaks that cannot be suppressed by name;
  # runs that never initialise MPI keep leak checking.
  list(APPEND TR_CLI_MPI_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()

# tr_cli_test(name "ENV1=a;ENV2=b" [SERIAL])
function(tr_cli_test name env)
  add_test(NAME cli_${name}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/${name}.sh $<TARGET_FILE:run_recipe>
                   ${CMAKE_SOURCE_DIR} ${MPIEXEC_EXECUTABLE})
  set_tests_properties(cli_${name} PROPERTIES LABELS "cli" TIMEOUT 120)
  if(env)
    set_tests_properties(cli_${name} PROPERTIES ENVIRONMENT "${env}")
  endif()
  if("SERIAL" IN_LIST ARGN)
    # Several ranks on two cores: never alongside other tests.
    set_tests_properties(cli_${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

foreach(t ${TR_CLI_TESTS})
  tr_cli_test(${t} "")
endforeach()
tr_cli_test(strict "STRICT_WARNING_OVERRIDE=${TR_CLI_STRICT_WARNING}")
tr_cli_test(real_run "${TR_CLI_MPI_ENV}")
tr_cli_test(startup_libs "${TR_CLI_MPI_ENV}")
tr_cli_test(hostile_files "${TR_CLI_MPI_ENV}")
tr_cli_test(finetune_run "${TR_CLI_MPI_ENV}")
tr_cli_test(hf_model "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(hf_convert "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(hf_moe_convert "${TR_CLI_MPI_ENV}" SERIAL)
# Four architectures, each with a four-rank run.
set_tests_properties(cli_hf_moe_convert PROPERTIES TIMEOUT 300)
tr_cli_test(hf_convert_rss "")
set_tests_properties(cli_hf_convert_rss PROPERTIES SKIP_RETURN_CODE 77)
tr_cli_test(hf_generate "")
tr_cli_test(hf_finetune "${TR_CLI_MPI_ENV}")
tr_cli_test(mpi_bad_world "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(effects "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(defer_wgrad "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(device_strict "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(plan_memory "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(plan "")
tr_cli_test(catalog_smoke "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(moe_resume "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(moe_ep_resume "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(moe_etp_resume "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(rank_errors "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(tensorboard "${TR_CLI_MPI_ENV}" SERIAL)
set_tests_properties(cli_tensorboard PROPERTIES SKIP_RETURN_CODE 77)
tr_cli_test(launchers "${TR_CLI_MPI_ENV}" SERIAL)
tr_cli_test(slurm "${TR_CLI_MPI_ENV}" SERIAL)
set_tests_properties(cli_slurm PROPERTIES SKIP_RETURN_CODE 77)
