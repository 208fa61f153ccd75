option(LOOM_TARGET_DEFAULTS "Default value for the Loom targets." ON)
option(LOOM_TARGET_AMDGPU "Enables Loom AMDGPU target support." ${LOOM_TARGET_DEFAULTS})
set(LOOM_TARGET_AMDGPU_TARGETS "loom_defaults" CACHE STRING "Loom AMDGPU target selectors.")
