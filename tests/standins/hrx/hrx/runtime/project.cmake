option(IREE_HAL_DRIVER_DEFAULTS "Default value for opt-in runtime HAL drivers." OFF)
option(IREE_HAL_DRIVER_AMDGPU "Enables the amdgpu runtime HAL driver." ${IREE_HAL_DRIVER_DEFAULTS})
# The versions of runtime/project.cmake read upstream default this to OFF; the pin's own value was
# not read, so the stand-in takes the default that downloads, which the recipe's OFF must override.
option(IREE_ENABLE_LIBBACKTRACE "Enables libbacktrace for Linux stack traces." ON)
set(IREE_HAL_AMDGPU_TARGETS
  "gfx9-generic;gfx90a;gfx9-4-generic;gfx10-1-generic;gfx10-3-generic;gfx11-generic;gfx12-generic"
  CACHE STRING "AMDGPU target selectors of this runtime build.")
foreach(_selector IN LISTS IREE_HAL_AMDGPU_TARGETS)
  if(NOT _selector MATCHES "^gfx[0-9a-z]+(-[0-9a-z]+)*$")
    message(FATAL_ERROR "hrx stand-in: unknown AMDGPU target selector '${_selector}'")
  endif()
endforeach()
