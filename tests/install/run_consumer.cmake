# Installs the build tree into WORK_DIR/prefix, then builds and runs
# tests/install/consumer twice: with find_package(strata CONFIG) and with
# pkg-config. Fails on the first step that fails.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# The C++ example of docs/tiers.md ("The residency manager"), as a source file.
file(READ ${SOURCE_DIR}/../../docs/tiers.md tiers_md)
string(FIND "${tiers_md}" "## The residency manager" section)
if(section EQUAL -1)
  message(FATAL_ERROR "docs/tiers.md has no section 'The residency manager'")
endif()
string(SUBSTRING "${tiers_md}" ${section} -1 tiers_md)
string(FIND "${tiers_md}" "```cpp\n" begin)
string(FIND "${tiers_md}" "\n```\n" end)
if(begin EQUAL -1 OR end LESS begin)
  message(FATAL_ERROR "docs/tiers.md: no C++ block in 'The residency manager'")
endif()
math(EXPR begin "${begin} + 7")
math(EXPR length "${end} - ${begin} + 1")
string(SUBSTRING "${tiers_md}" ${begin} ${length} example)
file(WRITE ${WORK_DIR}/tiers_example.cpp "${example}")

# CMake package.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/consumer -B ${WORK_DIR}/cmake-build
    -DTIERS_EXAMPLE=${WORK_DIR}/tiers_example.cpp
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build)
run(${WORK_DIR}/cmake-build/consumer)

# pkg-config.
find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs strata RESULT_VARIABLE rc
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config does not find strata in ${prefix}/lib/pkgconfig")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS}")
run(${CXX} ${cxx_flags} ${SOURCE_DIR}/consumer/main.cpp ${flags} -Wl,-rpath,${prefix}/lib
    -o ${WORK_DIR}/consumer-pkgconfig)
run(${WORK_DIR}/consumer-pkgconfig)
