# As a version of ROCm/hrx-system's libhrx/project.cmake: the HIP runtime API binding is on by default.
option(LIBHRX_BUILD_HIP_BINDING "Build libhrx HIP runtime API compatibility binding." ON)
