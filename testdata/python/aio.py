# SPDX-License-Identifier: Apache-2.0
"""An asyncio service traced by ddtrace (dd-trace-py), for otelctx's tests:
two tasks take turns on the loop's thread.

Usage: python aio.py DIR. It prints "listening 0 PID" (no port: nothing
is requested of it), then tasks a and b each run a request of two nested
spans and, in the inner one, spin on the CPU until DIR/STEP exists: a1, then
(a awaits) b1, then (b awaits) a2, then b2, printing "ready STEP TID TRACE
SPAN LOCALROOT" (hex, from the tracer's API) at each.

ddtrace's asyncio integration is patched in, as ddtrace-run does: before
CPython 3.14 (no context watchers) it is what tells the tracer that the loop
switched tasks; without it the thread keeps the span of the task that ran
before.
"""
import asyncio
import os
import sys
import threading

import ddtrace
from ddtrace.trace import tracer

ddtrace.patch(asyncio=True)

DIR = sys.argv[1]


def spin(step):
    path = os.path.join(DIR, step)
    n = 0
    while True:
        n += 1
        if n % 2000 == 0 and os.path.exists(path):
            return


def ready(step):
    span, root = tracer.current_span(), tracer.current_root_span()
    print("ready %s %d %032x %016x %016x" % (step, threading.get_native_id(), span.trace_id, span.span_id, root.span_id), flush=True)
    spin(step)


async def request(name):
    with tracer.trace("aio.request", resource=name):
        with tracer.trace("aio.inner"):
            ready(name + "1")
            await asyncio.sleep(0)  # the other task runs
            ready(name + "2")


async def main():
    print("listening 0 %d" % os.getpid(), flush=True)
    await asyncio.gather(request("a"), request("b"))
    print("done", flush=True)


asyncio.run(main())
