# Replays one trace on the sim device and on the cuda device over the
# stand-in driver (ctest sets LD_LIBRARY_PATH), same granularity, and checks
# that both give the same peaks. Run by ctest with -D STRATA=... -D TRACE=...
# -D OUT=...
file(MAKE_DIRECTORY ${OUT})
foreach(device sim cuda)
  if(device STREQUAL "sim")
    set(spec "sim:capacity=80GiB,granularity=2MiB")
  else()
    set(spec "cuda:0")
  endif()
  execute_process(COMMAND ${STRATA} replay ${TRACE} --quiet --device ${spec}
                          --json ${OUT}/replay_${device}.json
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "strata replay --device ${spec} failed (${rc}): ${err}")
  endif()
  file(READ ${OUT}/replay_${device}.json json_${device})
endforeach()
string(JSON device_name GET "${json_cuda}" device)
if(NOT device_name MATCHES "^cuda:0")
  message(FATAL_ERROR "the cuda run used '${device_name}', not the cuda device")
endif()
foreach(field events peak_live_bytes peak_allocated_bytes peak_reserved_bytes stitches
              stitched_bytes)
  string(JSON on_sim GET "${json_sim}" ${field})
  string(JSON on_cuda GET "${json_cuda}" ${field})
  if(NOT on_sim STREQUAL on_cuda)
    message(FATAL_ERROR "${field}: ${on_sim} on sim, ${on_cuda} on cuda over the stand-in")
  endif()
  message("${field}: ${on_sim} on both devices")
endforeach()
