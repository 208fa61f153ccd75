#ifndef LOOMC_H
#define LOOMC_H
int loomc_version(void);
int loomc_link_module(const char *name);
#endif
