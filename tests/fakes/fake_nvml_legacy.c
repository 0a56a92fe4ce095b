/* A fake NVML without the symbols of newer drivers: see fake_nvml.c. */
#define FAKE_NVML_LEGACY
#include "fake_nvml.c"
