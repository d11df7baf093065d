// Everything a MindSpore Lite concurrent-inference program uses. Porting one: include this (or the headers
// it names) instead of include/api/*.h and add `namespace mindspore = mslite_triton;`.
#ifndef MSLITE_TRITON_API_H_
#define MSLITE_TRITON_API_H_

#include "mslite_triton/context.h"
#include "mslite_triton/model_parallel_runner.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

#endif  // MSLITE_TRITON_API_H_
