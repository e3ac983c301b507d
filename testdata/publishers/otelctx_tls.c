// SPDX-License-Identifier: Apache-2.0

// otelctx_tls.c: the OTEP 4947 thread-context variable and two accessors.
//
// Compiled either into the publisher executable or into libotelctx_tls.so
// (-fPIC -shared, -mtls-dialect=gnu2 for TLSDESC or gnu for legacy General
// Dynamic). Every access goes through otelctx_tls_slot() so that, in the
// library, the compiler emits the dialect's relocations against the exported
// symbol (that is what a reader classifies), and the executable learns the
// address of its own thread's slot (the test's ground truth).
//
// Variants for the negative tests (-D...):
//   OTELCTX_NOT_TLS    a plain global named otel_thread_ctx_v1 (STT_OBJECT)
//   OTELCTX_PROTECTED  protected visibility (in .dynsym, but not default);
//                      internal/testutil/threadpub also patches this build's .dynsym
//                      entry to STV_HIDDEN for the "hidden" case
//   OTELCTX_LOCAL_DYNAMIC  exported with default visibility, but every access
//                      goes through a local alias with the Local Dynamic
//                      model (build with -mtls-dialect=gnu): the only
//                      relocation is a DTPMOD64 against symbol 0
//   OTELCTX_FILE_LOCAL file-static (STB_LOCAL in .symtab, never exported)
#include <stddef.h>

#if defined(OTELCTX_NOT_TLS)
__attribute__((visibility("default"))) void *otel_thread_ctx_v1;
#define OTEL_VAR otel_thread_ctx_v1
#elif defined(OTELCTX_PROTECTED)
__attribute__((visibility("protected"))) __thread void *otel_thread_ctx_v1;
#define OTEL_VAR otel_thread_ctx_v1
#elif defined(OTELCTX_LOCAL_DYNAMIC)
static __thread void *otel_ctx_local __attribute__((tls_model("local-dynamic")));
extern __thread void *otel_thread_ctx_v1 __attribute__((alias("otel_ctx_local"), visibility("default")));
#define OTEL_VAR otel_ctx_local
#elif defined(OTELCTX_FILE_LOCAL)
static __thread void *otel_thread_ctx_v1;
#define OTEL_VAR otel_thread_ctx_v1
#else
__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1;
#define OTEL_VAR otel_thread_ctx_v1
#endif

// noinline: the publisher must not see through the call and access the
// variable with its own (executable) TLS model.
__attribute__((visibility("default"), noinline)) void **otelctx_tls_slot(void) {
  return &OTEL_VAR;
}

// Stores with a compiler fence only, as OTEP 4947 asks of writers: readers
// only look at a stopped thread.
__attribute__((visibility("default"), noinline)) void otelctx_tls_set(void *rec) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  *(void *volatile *)&OTEL_VAR = rec;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
