#pragma once
int loomc_version(void);
