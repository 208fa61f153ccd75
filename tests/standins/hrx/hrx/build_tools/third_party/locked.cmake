# A locked download as ROCm/hrx populates one: FetchContent from the URL and sha256 that
# MODULE.cmake.lock records for it. Under FETCHCONTENT_FULLY_DISCONNECTED (what the tool passes)
# an archive nobody handed over stops configure, naming the dependency.
include(FetchContent)
function(standin_populate_locked name id)
  FetchContent_Declare(${name}
    URL ${IREE_DEP_${id}_URLS}
    URL_HASH SHA256=${IREE_DEP_${id}_SHA256}
    DOWNLOAD_EXTRACT_TIMESTAMP FALSE)
  FetchContent_GetProperties(${name})
  if(NOT ${name}_POPULATED)
    cmake_policy(PUSH)
    cmake_policy(SET CMP0169 OLD)
    FetchContent_Populate(${name})
    cmake_policy(POP)
  endif()
endfunction()
