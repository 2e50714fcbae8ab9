#ifndef FAKEGPU_KERNELS_H
#define FAKEGPU_KERNELS_H
#include "vendor.h"
#ifdef __cplusplus
extern "C" {
#endif
void fake_kernel_body(const uint64_t *p);
#ifdef __cplusplus
}
#endif
#endif
