// SPDX-License-Identifier: Apache-2.0

'use strict'
// A Node.js HTTP service traced by dd-trace with DD_TRACE_OTEL_CTX_ENABLED=true,
// whose requests use a known amount of CPU time: the CPU-time-by-endpoint
// measurements of otelctx (test/enrich, test/profilere2e) drive it.
//
//   node routes.js TRUTH     prints "ready PID PORT" (an HTTP server on
//                            127.0.0.1, dd-trace's http plugin tracing it)
//   GET /ROUTE?ms=M          sets the request span's http.route to /ROUTE
//                            (dd-trace then puts the endpoint "GET /ROUTE" into
//                            the thread context), busy-loops until the thread
//                            has used M ms of its own CPU time, notes the
//                            request in the truth and answers "ok REAL_START
//                            REAL_END CPU_NS"
//   GET /done                writes the truth to TRUTH, then answers
//   exit (a line on stdin)   exits
//
// The truth is threadpub's route format, one line per request: "span I TRACE
// SPAN BOOT_START BOOT_END REAL_START REAL_END ROUTE CPU_NS" (from just before
// the endpoint is set to just before the answer is sent; CPU_NS is the
// thread's CPU time in that window, process.threadCpuUsage), then "done BOOT
// REAL".
// Node has no CLOCK_BOOTTIME: the times are CLOCK_MONOTONIC plus
// NODEPUB_BOOT_OFFSET and NODEPUB_REAL_OFFSET (ns, measured by the driver).
const tracer = require('dd-trace').init({ service: 'otelctx-routes', env: 'test', version: '1.0.0' })
// After init: dd-trace's http plugin instruments the module as it loads.
const http = require('http')
const fs = require('fs')

const bootOffset = BigInt(process.env.NODEPUB_BOOT_OFFSET || '0')
const realOffset = BigInt(process.env.NODEPUB_REAL_OFFSET || '0')
const truthPath = process.argv[2]

// threadCPU is the main thread's CPU time in µs.
function threadCPU () {
  const u = process.threadCpuUsage()
  return u.user + u.system
}

function busyCPU (ms) {
  const until = threadCPU() + ms * 1000
  let x = 0
  while (threadCPU() < until) {
    for (let i = 0; i < 1000; i++) x += i
  }
  return x
}

const lines = []

function handle (req, res) {
  const url = new URL(req.url, 'http://localhost')
  if (url.pathname === '/done') {
    const done = process.hrtime.bigint()
    lines.push(`done ${done + bootOffset} ${done + realOffset}`)
    fs.writeFileSync(truthPath, lines.join('\n') + '\n')
    res.end('ok\n')
    return
  }
  const ms = Number(url.searchParams.get('ms'))
  const span = tracer.scope().active() // the http plugin's request span
  if (!span || !(ms > 0)) {
    res.statusCode = 400
    res.end('want GET /ROUTE?ms=M inside a traced request\n')
    return
  }
  const start = process.hrtime.bigint()
  const cpu0 = threadCPU()
  // A service without a framework names its route itself; dd-trace's
  // writer appends the settled endpoint to the span's record.
  span.setTag('http.route', url.pathname)
  busyCPU(ms)
  const cpu = threadCPU() - cpu0
  const end = process.hrtime.bigint()
  const c = span.context()
  lines.push(`span ${lines.length} ${c.toTraceId(true)} ${c.toSpanId(true)} ${start + bootOffset} ${end + bootOffset} ` +
    `${start + realOffset} ${end + realOffset} ${url.pathname} ${cpu * 1000}`)
  // The answer carries the window (CLOCK_REALTIME ns) and its CPU time:
  // the driver's warm-up waits until the profiler reports such a window
  // whole.
  res.end(`ok ${start + realOffset} ${end + realOffset} ${cpu * 1000}\n`)
}

const server = http.createServer(handle)
server.keepAliveTimeout = 600000
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`ready ${process.pid} ${server.address().port}\n`)
})
require('readline').createInterface({ input: process.stdin }).on('line', line => {
  if (line.trim() === 'exit') process.exit(0)
})
