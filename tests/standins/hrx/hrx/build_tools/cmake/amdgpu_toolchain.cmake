if(IREE_HAL_DRIVER_AMDGPU AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "IREE_HAL_DRIVER_AMDGPU=ON requires the configured C compiler to be Clang-family")
endif()
