// SPDX-License-Identifier: Apache-2.0

'use strict'
// A Node.js service traced by the OpenTelemetry SDK for Node (npm: the
// API, sdk-trace, resources, context-async-hooks), which publishes no
// process context: its resource is what the SDK's environment detector
// reads from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
//   node otelsvc.js          starts the SDK, prints "ready PID RESOURCE"
//                            (RESOURCE: the SDK's resource attributes as
//                            JSON), then runs busy spans of 10 ms, one after
//                            the other on async continuations, until killed
const { context, trace } = require('@opentelemetry/api')
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks')
const { defaultResource, detectResources, envDetector } = require('@opentelemetry/resources')
const { SimpleSpanProcessor, TracerProvider } = require('@opentelemetry/sdk-trace')

// Spans go nowhere: what otelctx reads is the process, not the spans.
const dropAll = {
  export (spans, done) { done({ code: 0 }) },
  shutdown () { return Promise.resolve() },
}

const resource = defaultResource().merge(detectResources({ detectors: [envDetector] }))
const provider = new TracerProvider({ resource, spanProcessors: [new SimpleSpanProcessor(dropAll)] })
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
trace.setGlobalTracerProvider(provider)
const tracer = trace.getTracer('otelctx-otelsvc')

function busy (ms) {
  const end = process.hrtime.bigint() + BigInt(ms) * 1000000n
  let x = 0
  while (process.hrtime.bigint() < end) x++
  return x
}

async function serve () {
  for (;;) {
    await tracer.startActiveSpan('work', async span => {
      busy(10)
      span.end()
    })
    await new Promise(resolve => setImmediate(resolve))
  }
}

process.stdout.write(`ready ${process.pid} ${JSON.stringify(resource.attributes)}\n`)
serve()
