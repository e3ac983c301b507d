// SPDX-License-Identifier: Apache-2.0

'use strict'
// A Node.js publisher for test/profilere2e (make e2e-profiler): dd-trace with
// DD_TRACE_OTEL_CTX_ENABLED=true, driven over stdin with the subset of
// threadpub.c's line protocol the scorer uses, its workers being
// worker_threads:
//
//   (first line)         ready PID
//   threads N            start N workers (each traced by dd-trace) -> ok
//   switch K N MS PATH   worker K runs N spans of MS ms, busy, one after the
//                        other on async continuations, and writes the ground
//                        truth to PATH in threadpub's format -> ok TID
//   wait K               -> ok once worker K's run is written
//   exit                 exits
//
// Node has no CLOCK_BOOTTIME: the truth's times are CLOCK_MONOTONIC plus
// NODEPUB_BOOT_OFFSET and NODEPUB_REAL_OFFSET (ns, CLOCK_BOOTTIME and
// CLOCK_REALTIME minus CLOCK_MONOTONIC, measured by the driver).
const { isMainThread, parentPort, Worker, workerData } = require('worker_threads')
const fs = require('fs')

const tracer = require('dd-trace').init({ service: 'otelctx-nodepub', env: 'test', version: '1.0.0' })

const bootOffset = BigInt(process.env.NODEPUB_BOOT_OFFSET || '0')
const realOffset = BigInt(process.env.NODEPUB_REAL_OFFSET || '0')

function busy (ms) {
  const end = process.hrtime.bigint() + BigInt(ms) * 1000000n
  let x = 0
  while (process.hrtime.bigint() < end) x++
  return x
}

async function run (n, ms, path) {
  const lines = []
  for (let i = 0; i < n; i++) {
    // The span's window runs from before dd-trace enters it to after it
    // finished it (the record invalidated): outside, the record is the
    // previous span's invalidated one or none, so a sample there is
    // unlinked, never linked to another span than the window's.
    let ids
    const start = process.hrtime.bigint()
    await tracer.trace('switch', async span => {
      ids = `${span.context().toTraceId(true)} ${span.context().toSpanId(true)}`
      busy(ms)
    })
    const end = process.hrtime.bigint()
    lines.push(`span ${i} ${ids} ${start + bootOffset} ${end + bootOffset} ${start + realOffset} ${end + realOffset}`)
    await null // the next span starts on a continuation, as in a service
  }
  const done = process.hrtime.bigint()
  lines.push(`done ${done + bootOffset} ${done + realOffset}`)
  fs.writeFileSync(path, lines.join('\n') + '\n')
}

function worker () {
  // The OS thread id: /proc/thread-self is "PID/task/TID".
  const tid = Number(fs.readlinkSync('/proc/thread-self').split('/')[2])
  parentPort.postMessage({ tid })
  parentPort.on('message', async m => {
    await run(m.n, m.ms, m.path)
    parentPort.postMessage({ done: true })
  })
}

function main () {
  const workers = []
  const say = line => process.stdout.write(line + '\n')
  let pending = null // the reply "threads" waits for
  const rl = require('readline').createInterface({ input: process.stdin })
  rl.on('line', line => {
    const f = line.trim().split(/\s+/)
    if (f[0] === 'threads') {
      let started = 0
      const n = +f[1]
      pending = () => { if (++started === n) say('ok') }
      for (let k = 0; k < n; k++) {
        const w = { tid: 0, running: false, waiting: false }
        w.thread = new Worker(__filename)
        w.thread.on('message', m => {
          if (m.tid) { w.tid = m.tid; pending() }
          if (m.done) {
            w.running = false
            if (w.waiting) { w.waiting = false; say('ok') }
          }
        })
        workers.push(w)
      }
    } else if (f[0] === 'switch') {
      const w = workers[+f[1]]
      w.running = true
      w.thread.postMessage({ n: +f[2], ms: +f[3], path: f[4] })
      say(`ok ${w.tid}`)
    } else if (f[0] === 'wait') {
      const w = workers[+f[1]]
      if (w.running) w.waiting = true
      else say('ok')
    } else if (f[0] === 'exit') {
      process.exit(0)
    } else {
      say(`error unknown command ${f[0]}`)
    }
  })
  say(`ready ${process.pid}`)
}

if (isMainThread) main()
else worker()
