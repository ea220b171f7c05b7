#!/usr/bin/env node
// Transactions with kafkajs 2.2.4.
//
// Env: BOOTSTRAP=host:port[,...], TOPIC_PREFIX (unique per run); NODE_PATH=.clients/node/node_modules.
// 1. `producer.transaction()`: commit, abort, commit (records on all 3 partitions); a consumer
//    with `readUncommitted: false` (kafkajs's default, read_committed) sees exactly the
//    committed records in order; one with `readUncommitted: true` also sees the aborted ones.
// 2. Consume-transform-produce: 30 input records; a read_committed group consumer (eachBatch,
//    no auto commit) writes each batch's output and `sendOffsets` its input offsets in one
//    transaction; the second batch is aborted and read again (seek to its first offset).
//    The output holds each input exactly once; the group's committed offsets are the input
//    ends.
// 3. Zombie fencing: transaction A writes; a second producer with the same transactionalId
//    starts a transaction (InitProducerId fences A) and commits; A's next send or commit fails
//    with a fencing error (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH); none of A's records is
//    visible to read_committed.
// kafkajs's only consumer is a group consumer: every read is a consumer in a fresh group
// from the beginning, which stops once it has the records it must have and nothing more came
// for 2 s.
'use strict'
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const { Kafka, logLevel } = require('kafkajs')

const P = 3
const KEEP_GOING = process.env.CLIENT_SUITE_KEEP_GOING === '1'
const failed = []
function fail (msg) {
  console.error(`FAIL: ${msg}`)
  process.exit(1)
}
function check (cond, msg) {
  if (cond) return true
  if (!KEEP_GOING) fail(msg)
  console.error(`FAIL (continuing): ${msg}`)
  failed.push(msg)
  return false
}
function step (msg) {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${msg}`)
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)

const bootstrap = process.env.BOOTSTRAP
if (!bootstrap) fail('BOOTSTRAP is not set')
const prefix = process.env.TOPIC_PREFIX || `txn-${process.pid}`
const kafka = new Kafka({ clientId: 'txn-kafkajs', brokers: bootstrap.split(','), logLevel: process.env.KAFKAJS_LOG === "debug" ? logLevel.DEBUG : logLevel.NOTHING })

function producer (transactionalId) {
  return kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 30000 })
}

// Every value of `topic` per partition, in offset order, read in a fresh group.
async function readAll (topic, readUncommitted, expectedCount) {
  const out = {}
  for (let p = 0; p < P; p++) out[p] = []
  let count = 0
  let last = Date.now()
  const c = kafka.consumer({ groupId: `${prefix}-reader-${Date.now()}-${Math.random()}`, readUncommitted, maxWaitTimeInMs: 200 })
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  await c.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      out[partition].push(message.value.toString())
      count++
      last = Date.now()
    }
  })
  const deadline = Date.now() + 60000
  while (Date.now() < deadline && (count < expectedCount || Date.now() - last < 2000)) await sleep(100)
  await c.disconnect()
  if (count < expectedCount) fail(`read ${topic}: ${count} of ${expectedCount} records within 60 s`)
  return out
}

async function main () {
  const simple = `${prefix}-kjtxn`; const input = `${prefix}-kjtxn-in`
  const output = `${prefix}-kjtxn-out`; const zombie = `${prefix}-kjtxn-zombie`
  step(`kafkajs 2.2.4, bootstrap ${bootstrap}`)
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ waitForLeaders: true, topics: [simple, input, output, zombie].map((topic) => ({ topic, numPartitions: P })) })
  step('created topics')

  // --- 1. commit, abort, commit ---
  const expected = {}; const everything = {}
  for (let p = 0; p < P; p++) { expected[p] = []; everything[p] = [] }
  const pr = producer(`${prefix}-kjsimple`)
  await pr.connect()
  for (const [txnNo, commit] of [[1, true], [2, false], [3, true]]) {
    const txn = await pr.transaction()
    for (let i = 0; i < 6; i++) {
      const v = `txn${txnNo}-${commit ? 'c' : 'a'}-${i}`
      await txn.send({ topic: simple, messages: [{ key: `k${i}`, value: v, partition: i % P }] })
      everything[i % P].push(v)
      if (commit) expected[i % P].push(v)
    }
    if (commit) await txn.commit(); else await txn.abort()
    step(`transaction ${txnNo} ${commit ? 'committed' : 'aborted'}`)
  }
  await pr.disconnect()
  let got = await readAll(simple, false, 12)
  if (check(same(got, expected), `read_committed after commit/abort/commit: ${JSON.stringify(got)}, expected ${JSON.stringify(expected)}`)) {
    step('read_committed sees exactly the committed records')
  }
  got = await readAll(simple, true, 18)
  if (check(same(got, everything), `read_uncommitted: ${JSON.stringify(got)}, expected ${JSON.stringify(everything)}`)) {
    step('read_uncommitted also sees the aborted records')
  }

  // --- 2. consume-transform-produce ---
  const N = 30
  const plain = kafka.producer()
  await plain.connect()
  await plain.send({ topic: input, messages: [...Array(N).keys()].map((i) => ({ key: `in${i}`, value: `in-${i}`, partition: i % P })) })
  await plain.disconnect()
  const group = `${prefix}-kjctp`
  const ctp = producer(`${prefix}-kjctp`)
  await ctp.connect()
  const consumer = kafka.consumer({ groupId: group, readUncommitted: false, maxWaitTimeInMs: 200 })
  await consumer.connect()
  await consumer.subscribe({ topic: input, fromBeginning: true })
  let done = 0; let batches = 0; let aborted = false
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      if (batch.messages.length === 0) return
      batches++
      const txn = await ctp.transaction()
      await txn.send({ topic: output, messages: batch.messages.map((m) => ({ key: m.key, value: `out-${m.value}`, partition: batch.partition })) })
      await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic: input, partitions: [{ partition: batch.partition, offset: (BigInt(batch.lastOffset()) + 1n).toString() }] }] })
      if (batches === 2 && !aborted) {
        await txn.abort()
        aborted = true
        consumer.seek({ topic: input, partition: batch.partition, offset: batch.firstOffset() })
        step(`aborted a batch of ${batch.messages.length} (partition ${batch.partition}), seeking back to ${batch.firstOffset()}`)
        return
      }
      await txn.commit()
      for (const m of batch.messages) resolveOffset(m.offset)
      await heartbeat()
      done += batch.messages.length
    }
  })
  const deadline = Date.now() + 60000
  while (done < N && Date.now() < deadline) await sleep(100)
  await consumer.disconnect()
  await ctp.disconnect()
  if (done < N) fail(`consume-transform-produce: ${done} of ${N} inputs within 60 s`)
  if (!aborted) fail('no batch was aborted')
  step(`processed ${N} inputs in ${batches} transactions (one aborted)`)
  const out = await readAll(output, false, N)
  const all = Object.values(out).flat().sort()
  const want = [...Array(N).keys()].map((i) => `out-in-${i}`).sort()
  let ok = check(same(all, want), `output (read_committed) ${JSON.stringify(all)}, expected each input once`)
  for (const [p, vals] of Object.entries(out)) {
    const order = vals.map((v) => Number(v.split('-').pop()))
    ok = check(same(order, [...order].sort((a, b) => a - b)), `output partition ${p} out of input order: ${order}`) && ok
  }
  if (ok) step('output holds every input exactly once, in input order per partition')
  const offs = await admin.fetchOffsets({ groupId: group, topics: [input] })
  const gotOffs = Object.fromEntries(offs[0].partitions.map((x) => [x.partition, x.offset]))
  const wantOffs = Object.fromEntries([...Array(P).keys()].map((p) => [p, String(N / P)]))
  if (check(same(gotOffs, wantOffs), `group committed ${JSON.stringify(gotOffs)}, expected the input ends ${JSON.stringify(wantOffs)}`)) {
    step(`group committed offsets are the input ends ${JSON.stringify(wantOffs)}`)
  }

  // --- 3. zombie fencing ---
  const a = producer(`${prefix}-kjzombie`)
  await a.connect()
  const ta = await a.transaction()
  await ta.send({ topic: zombie, messages: [{ value: 'zombie-1', partition: 0 }] })
  await ta.send({ topic: zombie, messages: [{ value: 'zombie-2', partition: 1 }] })
  const b = producer(`${prefix}-kjzombie`)
  await b.connect()
  const tb = await b.transaction()
  step('second producer with the same transactionalId initialised')
  await tb.send({ topic: zombie, messages: [{ value: 'new-1', partition: 0 }] })
  await tb.commit()
  await b.disconnect()
  let fenced = null
  try {
    await ta.send({ topic: zombie, messages: [{ value: 'zombie-3', partition: 2 }] })
    await ta.commit()
  } catch (e) {
    fenced = e
  }
  if (!fenced) fail("the fenced producer's send and commit succeeded")
  const what = `${fenced.type || ''} ${fenced.name} ${fenced.message}`
  check(/PRODUCER_FENCED|INVALID_PRODUCER_EPOCH|fenced|epoch/i.test(what), `the fenced producer failed with ${what}, expected fencing`)
  step(`the older producer is fenced: ${what}`)
  await a.disconnect().catch(() => {})
  got = await readAll(zombie, false, 1)
  if (check(same(got, { 0: ['new-1'], 1: [], 2: [] }), `read_committed after fencing: ${JSON.stringify(got)}, expected only new-1`)) {
    step("none of the fenced producer's records is visible")
  }
  await admin.disconnect()
  if (failed.length) fail(`${failed.length} check(s) failed, first: ${failed[0]}`)
  console.log('OK kafkajs transactions')
  process.exit(0)
}

main().catch((e) => fail(`${e.name}: ${e.message}${e.type ? ` (${e.type})` : ''}`))
