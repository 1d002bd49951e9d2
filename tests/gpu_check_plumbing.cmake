# tools/gpu_check.sh's plumbing, where CI can run it: a step that passes and an unknown one, in a fresh
# OUT folder. The script must fail (a step failed), keep going after the failure, and write one summary
# line per step; the conformance step runs its emulated side here (no GPU) and passes. The unknown step takes
# no time, but whole seconds from `date +%s` make it 0 or 1.
file(REMOVE_RECURSE "${WORK_DIR}")
file(REMOVE "${WORK_DIR}.tgz")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "GPU_CHECK_TAR=${WORK_DIR}.tgz"
                        bash "${SOURCE_DIR}/tools/gpu_check.sh" "${WORK_DIR}" conformance no_such_step conformance
                WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "gpu_check.sh passed with an unknown step")
endif()
file(READ "${WORK_DIR}/summary.md" summary)
string(REGEX MATCHALL "\\| conformance \\| passed \\|" passed "${summary}")
list(LENGTH passed passed_count)
if(NOT passed_count EQUAL 2 OR NOT summary MATCHES "\\| no_such_step \\| FAILED \\| [01] \\| unknown step 'no_such_step' \\|")
  message(FATAL_ERROR "unexpected summary:\n${summary}")
endif()
if(NOT EXISTS "${WORK_DIR}/conformance.txt" OR NOT out MATCHES "gpu_check: FAILED: no_such_step\n")
  message(FATAL_ERROR "missing the conformance log or the final verdict")
endif()
# GPU_CHECK_TAR: the whole OUT folder in one file, the summary in it.
execute_process(COMMAND tar -tzf "${WORK_DIR}.tgz" OUTPUT_VARIABLE packed RESULT_VARIABLE tar_rc)
if(NOT tar_rc EQUAL 0 OR NOT packed MATCHES "summary\\.md" OR NOT packed MATCHES "conformance\\.txt")
  message(FATAL_ERROR "GPU_CHECK_TAR: no packed summary and log in ${WORK_DIR}.tgz:\n${packed}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(REMOVE "${WORK_DIR}.tgz")
