/* A fake NVML without the symbols of newer drivers: see fake_nvml.c. */
#define FAKE_NVML_NO_MEM_V2
#include "fake_nvml.c"
