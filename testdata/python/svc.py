# SPDX-License-Identifier: Apache-2.0
"""A WSGI service traced by ddtrace (dd-trace-py), for otelctx's tests.

Usage: python svc.py DIR [late N | untraced]. It serves on 127.0.0.1 (port printed as
"listening PORT"), each request in its own thread (ThreadingMixIn), through
ddtrace's WSGI middleware:

  /work?step=S&depth=D  the request's root span and D-1 nested ones; in
                        the innermost it prints its ground truth from the
                        tracer's API, "ready S TID TRACE SPAN LOCALROOT"
                        (hex), and spins on the CPU until DIR/S exists.
  /idle?step=S          a new thread ends a span of its own, prints
                        "ready S TID - - -" and spins with no span active.
  /switch?spans=N&ms=M  a warm-up span (step "warm") then N requests in
                        turn, each spinning in its inner span for M ms of
                        CPU time (switch below); "done PID" at the end.
                        With &fork=1 a forked child does it on a new thread
                        (its own steps: "warm" is then the child's) and the
                        answer is the child's PID.

With "untraced", ddtrace is not imported at all (the service publishes
nothing; nothing is requested of it). With "late N", N threads start first ("pool TID..."), then ddtrace is
imported (its native module dlopen'ed), and those threads serve every
request: their DTVs predate the module's.

Spinning, not sleeping: an eBPF sampler sees a thread only while it runs.
"""
import os
import queue
import socketserver
import sys
import threading
import time
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

DIR = sys.argv[1]
tracer = None  # ddtrace's, imported by main
out_lock = threading.Lock()


def say(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def spin(step):
    path = os.path.join(DIR, step)
    n = 0
    while True:
        n += 1
        if n % 2000 == 0 and os.path.exists(path):
            return


def truth(step):
    span = tracer.current_span()
    root = tracer.current_root_span()
    say("ready %s %d %032x %016x %016x" % (step, threading.get_native_id(), span.trace_id, span.span_id, root.span_id))


def nested(step, depth):
    if depth <= 1:
        truth(step)
        spin(step)
        return
    with tracer.trace("svc.level%d" % depth, resource=step):
        nested(step, depth - 1)


def idle(step):
    with tracer.trace("svc.before"):
        pass
    say("ready %s %d - - -" % (step, threading.get_native_id()))
    spin(step)


def switch(spans, ms):
    """A warm-up span (step "warm", spinning until released), then spans
    requests of two nested spans, the inner one spinning for ms of the
    thread's CPU time; the truth, in CLOCK_MONOTONIC ns, goes to
    DIR/truth-PID: "span I TRACE SPAN START END" (the inner span's, the warm
    one as span 0), then "done END"."""
    lines = []
    with tracer.trace("svc.request", resource="warm"):
        with tracer.trace("svc.warm") as span:
            start = time.monotonic_ns()
            truth("warm")
            spin("warm")
            lines.append("span 0 %032x %016x %d %d" % (span.trace_id, span.span_id, start, time.monotonic_ns()))
    for i in range(1, spans + 1):
        with tracer.trace("svc.request", resource="switch"):
            with tracer.trace("svc.switch") as span:
                start = time.monotonic_ns()
                until = time.thread_time_ns() + ms * 1000000
                while time.thread_time_ns() < until:
                    pass
                lines.append("span %d %032x %016x %d %d" % (i, span.trace_id, span.span_id, start, time.monotonic_ns()))
    lines.append("done %d" % time.monotonic_ns())
    with open(os.path.join(DIR, "truth-%d" % os.getpid()), "w") as f:
        f.write("\n".join(lines) + "\n")
    say("done %d" % os.getpid())


def forked(spans, ms):
    # A new thread of the child: ddtrace re-publishes the process context
    # after fork, with the child's own runtime id.
    t = threading.Thread(target=switch, args=(spans, ms))
    t.start()
    t.join()
    os._exit(0)


def app(environ, start_response):
    q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    path = environ["PATH_INFO"]
    body = b"ok\n"
    if path == "/work":
        nested(q["step"], int(q.get("depth", "2")))
    elif path == "/idle":
        threading.Thread(target=idle, args=(q["step"],), daemon=True).start()
    elif path == "/switch":
        spans, ms = int(q["spans"]), int(q["ms"])
        if q.get("fork") == "1":
            pid = os.fork()
            if pid == 0:
                forked(spans, ms)
            threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
            body = b"%d\n" % pid
        else:
            switch(spans, ms)
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class PoolServer(socketserver.ThreadingMixIn, WSGIServer):
    """Requests go to the threads of a pool started before ddtrace."""

    pool = queue.Queue()

    def process_request(self, request, client_address):
        self.pool.put((self, request, client_address))


def pool_worker(tids, started):
    tids.append(threading.get_native_id())
    started.wait()
    while True:
        server, request, client_address = PoolServer.pool.get()
        server.process_request_thread(request, client_address)


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main():
    global tracer
    server_class = Server
    if len(sys.argv) > 3 and sys.argv[2] == "late":
        n = int(sys.argv[3])
        tids, started = [], threading.Barrier(n + 1)
        for _ in range(n):
            threading.Thread(target=pool_worker, args=(tids, started), daemon=True).start()
        started.wait()
        say("pool " + " ".join(str(t) for t in tids))
        server_class = PoolServer
    wsgi = app
    if sys.argv[2:3] != ["untraced"]:
        from ddtrace.contrib.wsgi import DDWSGIMiddleware
        from ddtrace.trace import tracer as dd_tracer

        tracer, wsgi = dd_tracer, DDWSGIMiddleware(app)
    httpd = make_server("127.0.0.1", 0, wsgi, server_class=server_class, handler_class=QuietHandler)
    say("listening %d %d" % (httpd.server_port, os.getpid()))
    httpd.serve_forever()


if __name__ == "__main__":
    main()
