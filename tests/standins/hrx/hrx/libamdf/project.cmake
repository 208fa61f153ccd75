# As ROCm/hrx's libamdf/project.cmake: libamdf is built by default whenever the AMDGPU driver is.
if(NOT DEFINED AMDF_BUILD_DEFAULT)
  set(AMDF_BUILD_DEFAULT ${IREE_HAL_DRIVER_AMDGPU})
endif()
option(AMDF_BUILD "Build the portable AMD GPU and XDNA native device library." ${AMDF_BUILD_DEFAULT})
