// SPDX-License-Identifier: Apache-2.0

'use strict'
// A Node.js service traced by dd-trace with DD_TRACE_OTEL_CTX_ENABLED=true
// (the nodejs_v1_dev thread context), driven by the Go tests of otelctx.
//
//   node pub.js shapes DIR   each shape of async code, on the main thread and
//                            in a worker_threads worker: prints
//                            "ready NAME THREAD TRACE SPAN" ("-" when no span
//                            is active), then spins on the CPU until the file
//                            DIR/NAME exists
//   node pub.js switch DIR SPANS MS
//                            a worker spins in a warm-up span (a "ready" step),
//                            then switches between SPANS spans of MS ms each,
//                            busy, and writes DIR/truth: "span I TRACE SPAN
//                            START END" per span and "done T" (CLOCK_MONOTONIC
//                            ns, converted by the test); then "done"
const { isMainThread, parentPort, Worker, workerData } = require('worker_threads')
const fs = require('fs')
const path = require('path')

const tracer = require('dd-trace').init({ service: 'otelctx-nodepub', env: 'test', version: '1.0.0' })

const mode = isMainThread ? process.argv[2] : workerData.mode
const dir = isMainThread ? process.argv[3] : workerData.dir
const where = isMainThread ? 'main' : 'worker'

function spinUntil (name) {
  const file = path.join(dir, name)
  let x = 0
  while (!fs.existsSync(file)) {
    for (let i = 0; i < 200000; i++) x += i
  }
  return x
}

// say writes a line on the main thread's stdout: a worker's own stdout is
// flushed by its event loop, which a spinning worker does not run.
function say (line) {
  if (isMainThread) process.stdout.write(line + '\n')
  else parentPort.postMessage(line)
}

function startWorker (data) {
  const w = new Worker(__filename, { workerData: data })
  w.on('message', say)
  return new Promise((resolve, reject) => { w.on('exit', resolve); w.on('error', reject) })
}

function ready (name, span) {
  const ids = span ? `${span.context().toTraceId(true)} ${span.context().toSpanId(true)}` : '- -'
  say(`ready ${where}-${name} ${where} ${ids}`)
  spinUntil(`${where}-${name}`)
}

const tick = () => new Promise(resolve => setTimeout(resolve, 1))

// NODEPUB_EXTRA_ALS=N: N more AsyncLocalStorage instances hold a value in
// every frame of the main thread (a frame map of N+ entries).
function extraStorages () {
  const { AsyncLocalStorage } = require('async_hooks')
  const n = +(process.env.NODEPUB_EXTRA_ALS || 0)
  for (let i = 0; i < n; i++) new AsyncLocalStorage().enterWith(i)
}

async function shapes () {
  if (isMainThread) extraStorages()
  ready('none', null)
  tracer.trace('sync', span => ready('sync', span))
  await tracer.trace('await', async span => {
    await tick()
    ready('await', span)
  })
  await tracer.trace('timer', span => new Promise(resolve => setTimeout(() => { ready('timer', span); resolve() }, 1)))
  await tracer.trace('promise', span => Promise.resolve().then(() => ready('promise', span)))
  await tracer.trace('immediate', span => new Promise(resolve => setImmediate(() => { ready('immediate', span); resolve() })))
  await tracer.trace('outer', async outer => {
    await tracer.trace('inner', async inner => {
      await tick()
      ready('inner', inner)
    })
    await tick()
    ready('outer', outer)
  })
  await tick()
  ready('ended', null)
}

function busy (ms) {
  const end = process.hrtime.bigint() + BigInt(ms) * 1000000n
  let x = 0
  while (process.hrtime.bigint() < end) x++
  return x
}

async function switchSpans (spans, ms) {
  await tracer.trace('warmup', async span => ready('warmup', span))
  const lines = []
  for (let i = 0; i < spans; i++) {
    await tracer.trace('switch', async span => {
      const c = span.context()
      const start = process.hrtime.bigint()
      busy(ms)
      lines.push(`span ${i} ${c.toTraceId(true)} ${c.toSpanId(true)} ${start} ${process.hrtime.bigint()}`)
    })
    // The span ended; the next starts after a continuation, as in a service.
    await null
  }
  lines.push(`done ${process.hrtime.bigint()}`)
  fs.writeFileSync(path.join(dir, 'truth'), lines.join('\n') + '\n')
}

async function main () {
  if (mode === 'shapes') {
    await shapes()
    if (isMainThread) {
      await startWorker({ mode, dir })
      say('done')
    }
  } else if (mode === 'switch') {
    if (isMainThread) {
      await startWorker({ mode, dir, spans: +process.argv[4], ms: +process.argv[5] })
      say('done')
    } else {
      await switchSpans(workerData.spans, workerData.ms)
    }
  } else {
    throw new Error(`unknown mode ${mode}`)
  }
}

main().catch(e => { console.error(e); process.exit(1) })
