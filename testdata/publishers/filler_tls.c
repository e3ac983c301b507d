// SPDX-License-Identifier: Apache-2.0

// filler_tls.c: a library whose only purpose is to occupy static TLS.
// Built as libfiller_N_I.so with -DFILL_BYTES=N and -mtls-dialect=gnu2: when
// it is dlopen'ed and touched, glibc places a TLSDESC module in the optional
// static TLS surplus (glibc.rtld.optional_static_tls, 512 bytes by default)
// while it fits. Dlopen'ing enough of them leaves no room for
// libotelctx_tls.so, which then gets dynamic TLS (allocated lazily per
// thread). void* elements: the same 8-byte alignment as otel_thread_ctx_v1,
// so once an 8-byte filler does not fit, neither does the otelctx library.
#ifndef FILL_BYTES
#define FILL_BYTES 8
#endif
__thread void *filler_tls[FILL_BYTES / sizeof(void *)];

__attribute__((visibility("default"), noinline)) void *filler_touch(void) {
  filler_tls[0] = (void *)&filler_tls; // first access resolves the descriptor
  return &filler_tls[0];
}
