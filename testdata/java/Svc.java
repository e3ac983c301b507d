// SPDX-License-Identifier: Apache-2.0

// An HTTP service traced by the Datadog Java agent (dd-java-agent), for
// otelctx's tests: the shape of testdata/python/svc.py.
//
// Usage: java -javaagent:dd-java-agent.jar Svc DIR platform|virtual, or
// java -Djdk.attach.allowAttachSelf=true -Dsvc.agent=dd-java-agent.jar Svc
// DIR late N. It serves on 127.0.0.1 (port printed as "listening PORT
// PID"), requests on a pool of platform threads or a virtual thread each:
//
//   /work?step=S&depth=D  a root span and D-1 nested ones (@Trace); in the
//                         innermost it prints its ground truth from the
//                         tracer's API, "ready S TID TRACE SPAN LOCALROOT"
//                         (hex), and spins on the CPU until DIR/S exists.
//   /switch?spans=N&ms=M  a warm-up span (step "warm"), then N requests
//                         in turn spinning in their inner span for M ms of
//                         CPU time; truth to DIR/truth-PID, as svc.py's.
//   /idle?step=S          a new platform thread ends a span of its own,
//                         prints "ready S TID - - -" and spins with none.
//
// With "late N", a pool of N platform threads starts ("pool TID..."), then
// the agent is attached (its profiler's library loaded), and those threads
// serve every request: their DTVs predate the library's.
//
// Spinning, not sleeping: an eBPF sampler sees a thread only while it runs,
// and a virtual thread that spins stays on its carrier (whose TID it prints).
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import com.sun.tools.attach.VirtualMachine;
import datadog.trace.api.CorrelationIdentifier;
import datadog.trace.api.Trace;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

public class Svc {
    static Path dir;

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    // The OS thread running this code now: for a virtual thread, its carrier.
    static String tid() throws Exception {
        return Files.readSymbolicLink(Paths.get("/proc/thread-self")).getFileName().toString();
    }

    static void spin(String step) {
        Path p = dir.resolve(step);
        for (long n = 1; ; n++) {
            if (n % 20000 == 0 && Files.exists(p)) {
                return;
            }
        }
    }

    static String hex16(String decimal) {
        return String.format("%016x", Long.parseUnsignedLong(decimal));
    }

    // The traced code, in a class of its own: loaded at the first request,
    // after the agent even when it is attached late (which instruments the
    // classes it sees loaded from then on).
    static class Traced {
        // CorrelationIdentifier gives the 128-bit trace id in hex with
        // dd.trace.128.bit.traceid.logging.enabled, the span id in decimal.
        static void truth(String step, String localRoot) throws Exception {
            String trace = CorrelationIdentifier.getTraceId();
            if (trace.length() < 32) {
                trace = "0000000000000000" + hex16(trace);
            }
            String line = "ready " + step + " %s " + trace + " " + hex16(CorrelationIdentifier.getSpanId()) + " " + hex16(localRoot);
            say(String.format(line, tid()));
            spin(step);
        }

        @Trace(operationName = "svc.request")
        static void request(String step, int depth) throws Exception {
            String root = CorrelationIdentifier.getSpanId();
            if (depth <= 1) {
                truth(step, root);
            } else {
                nested(step, depth - 1, root);
            }
        }

        @Trace(operationName = "svc.nested")
        static void nested(String step, int depth, String root) throws Exception {
            if (depth <= 1) {
                truth(step, root);
            } else {
                nested(step, depth - 1, root);
            }
        }

        @Trace(operationName = "svc.before")
        static void before() {}

        // The ids of the active span, as the truth file has them.
        static String ids() {
            String trace = CorrelationIdentifier.getTraceId();
            if (trace.length() < 32) {
                trace = "0000000000000000" + hex16(trace);
            }
            return trace + " " + hex16(CorrelationIdentifier.getSpanId());
        }

        @Trace(operationName = "svc.request", resourceName = "warm")
        static void warm(StringBuilder out) throws Exception {
            warmInner(out, CorrelationIdentifier.getSpanId());
        }

        @Trace(operationName = "svc.warm")
        static void warmInner(StringBuilder out, String root) throws Exception {
            long start = System.nanoTime();
            truth("warm", root);
            out.append("span 0 ").append(ids()).append(" ").append(start).append(" ").append(System.nanoTime()).append("\n");
        }

        @Trace(operationName = "svc.request", resourceName = "switch")
        static void switchRequest(StringBuilder out, int i, long ms) {
            switchInner(out, i, ms);
        }

        @Trace(operationName = "svc.switch")
        static void switchInner(StringBuilder out, int i, long ms) {
            long start = System.nanoTime();
            ThreadMXBean mx = ManagementFactory.getThreadMXBean();
            long until = mx.getCurrentThreadCpuTime() + ms * 1000000;
            while (mx.getCurrentThreadCpuTime() < until) {
                // spin: the span's samples
            }
            out.append("span ").append(i).append(" ").append(ids()).append(" ").append(start).append(" ").append(System.nanoTime()).append("\n");
        }

        // The shape of svc.py's switch: truth in System.nanoTime
        // (CLOCK_MONOTONIC) to DIR/truth-PID, "done PID" at the end.
        static void run(int spans, long ms) throws Exception {
            StringBuilder out = new StringBuilder();
            warm(out);
            for (int i = 1; i <= spans; i++) {
                switchRequest(out, i, ms);
            }
            out.append("done ").append(System.nanoTime()).append("\n");
            long pid = ProcessHandle.current().pid();
            Files.write(dir.resolve("truth-" + pid), out.toString().getBytes());
            say("done " + pid);
        }
    }

    static Map<String, String> query(HttpExchange ex) {
        Map<String, String> q = new HashMap<>();
        String raw = ex.getRequestURI().getRawQuery();
        if (raw != null) {
            for (String kv : raw.split("&")) {
                String[] p = kv.split("=", 2);
                q.put(p[0], p.length > 1 ? p[1] : "");
            }
        }
        return q;
    }

    static void handle(HttpExchange ex) {
        try {
            Map<String, String> q = query(ex);
            String step = q.get("step");
            switch (ex.getRequestURI().getPath()) {
                case "/work":
                    Traced.request(step, Integer.parseInt(q.getOrDefault("depth", "2")));
                    break;
                case "/switch":
                    Traced.run(Integer.parseInt(q.get("spans")), Long.parseLong(q.get("ms")));
                    break;
                case "/idle":
                    Thread t = new Thread(() -> {
                        try {
                            Traced.before();
                            say("ready " + step + " " + tid() + " - - -");
                            spin(step);
                        } catch (Exception e) {
                            e.printStackTrace();
                        }
                    }, "svc-idle-" + step);
                    t.setDaemon(true);
                    t.start();
                    break;
                default:
                    ex.sendResponseHeaders(404, -1);
                    return;
            }
            byte[] body = "ok\n".getBytes();
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(body);
            }
        } catch (Exception e) {
            e.printStackTrace();
        } finally {
            ex.close();
        }
    }

    public static void main(String[] args) throws Exception {
        dir = Paths.get(args[0]);
        ExecutorService pool;
        String mode = args.length > 1 ? args[1] : "platform";
        if (mode.equals("virtual")) {
            pool = (ExecutorService) Executors.class.getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        } else if (mode.equals("late")) {
            int n = Integer.parseInt(args[2]);
            AtomicInteger id = new AtomicInteger();
            pool = Executors.newFixedThreadPool(n, r -> new Thread(r, "svc-late-" + id.incrementAndGet()));
            // Each of the n threads reports its TID, all held until every one has.
            CountDownLatch started = new CountDownLatch(n);
            StringBuffer tids = new StringBuffer("pool");
            for (int i = 0; i < n; i++) {
                pool.execute(() -> {
                    try {
                        tids.append(" " + tid());
                        started.countDown();
                        started.await();
                    } catch (Exception e) {
                        e.printStackTrace();
                    }
                });
            }
            started.await();
            say(tids.toString());
            VirtualMachine vm = VirtualMachine.attach(String.valueOf(ProcessHandle.current().pid()));
            vm.loadAgent(System.getProperty("svc.agent"));
            vm.detach();
        } else {
            AtomicInteger n = new AtomicInteger();
            pool = Executors.newFixedThreadPool(6, r -> new Thread(r, "svc-worker-" + n.incrementAndGet()));
        }
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        server.createContext("/", Svc::handle);
        server.setExecutor(pool);
        server.start();
        say("listening " + server.getAddress().getPort() + " " + ProcessHandle.current().pid());
    }
}
