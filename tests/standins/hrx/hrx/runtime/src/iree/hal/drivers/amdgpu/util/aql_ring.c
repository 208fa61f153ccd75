/* Stand-in for HSA_AMD_AGENT_INFO_PM4_EMULATION: gfx1151's runtime rejects it. */
static int query_pm4_emulation(int *out) {
  (void)out;
  return -1;
}

/* 0: native AQL, 1: PM4-emulated, negative: the device cannot be used. */
int iree_hal_amdgpu_aql_queue_mode(void) {
  int pm4_emulation = 0;
  if (query_pm4_emulation(&pm4_emulation) != 0) {
    return -1;
  }
  return pm4_emulation;
}
