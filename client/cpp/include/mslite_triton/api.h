// Everything a MindSpore Lite cloud-inference program uses. Porting one: include this (or the headers it
// names) instead of include/api/*.h; the names are offered in namespace mindspore too.
#ifndef MSLITE_TRITON_API_H_
#define MSLITE_TRITON_API_H_

#include "mslite_triton/context.h"
#include "mslite_triton/model.h"
#include "mslite_triton/model_group.h"
#include "mslite_triton/model_parallel_runner.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

#endif  // MSLITE_TRITON_API_H_
