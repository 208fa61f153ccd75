include(FetchContent)
if(IREE_HAL_DRIVER_AMDGPU OR LOOM_TARGET_AMDGPU)
  FetchContent_Declare(hsa_runtime_headers
    URL ${IREE_DEP_HSA_RUNTIME_HEADERS_URLS}
    URL_HASH SHA256=${IREE_DEP_HSA_RUNTIME_HEADERS_SHA256}
    DOWNLOAD_EXTRACT_TIMESTAMP FALSE)
  FetchContent_GetProperties(hsa_runtime_headers)
  if(NOT hsa_runtime_headers_POPULATED)
    cmake_policy(PUSH)
    cmake_policy(SET CMP0169 OLD)
    FetchContent_Populate(hsa_runtime_headers)
    cmake_policy(POP)
  endif()
  if(NOT EXISTS "${hsa_runtime_headers_SOURCE_DIR}/include/hsa/hsa.h")
    message(FATAL_ERROR "hrx stand-in: no hsa/hsa.h in ${hsa_runtime_headers_SOURCE_DIR}")
  endif()
endif()
