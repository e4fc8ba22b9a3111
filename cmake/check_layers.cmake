# The layering rule (README, "How the code is laid out"): a folder includes
# its own headers and the public ones in include/strata/, never another
# folder's. Fails naming every include that breaks it.
#   cmake -DSOURCE_DIR=<repo> -P cmake/check_layers.cmake
set(layers device conf allocator tiers prefetch kernels collectives gradients integrations tools bench)
set(violations "")
foreach(layer IN LISTS layers)
  file(GLOB_RECURSE sources ${SOURCE_DIR}/${layer}/*.cpp ${SOURCE_DIR}/${layer}/*.hpp
       ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.c ${SOURCE_DIR}/${layer}/*.cu)
  foreach(source IN LISTS sources)
    file(STRINGS ${source} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    get_filename_component(dir ${source} DIRECTORY)
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" header "${line}")
      if(header MATCHES "^strata/")
        if(NOT EXISTS ${SOURCE_DIR}/include/${header})
          list(APPEND violations "${source}: ${header} is not a public header")
        endif()
        continue()
      endif()
      # Resolved against the including file's folder, else the layer's top
      # folder: it must stay inside the layer.
      get_filename_component(resolved ${dir}/${header} ABSOLUTE)
      if(NOT EXISTS ${resolved})
        get_filename_component(resolved ${SOURCE_DIR}/${layer}/${header} ABSOLUTE)
      endif()
      string(FIND "${resolved}" "${SOURCE_DIR}/${layer}/" at)
      if(NOT at EQUAL 0 OR NOT EXISTS ${resolved})
        list(APPEND violations "${source}: \"${header}\" is not ${layer}/'s own header")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "layering: upper layers use other folders' private headers:\n  ${text}\n"
                      "Use the public API in include/strata/ (make it public if it is missing).")
endif()
message(STATUS "layering: every folder includes only its own headers and include/strata/")
