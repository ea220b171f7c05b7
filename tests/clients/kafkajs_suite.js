#!/usr/bin/env node
// Client suite: kafkajs 2.2.4 (+ kafkajs-snappy 1.1.0, kafkajs-lz4 1.2.1).
//
// Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX (unique per run); NODE_PATH=.clients/node/node_modules.
// Admin CreateTopics (3 partitions) and Metadata; per codec (none, gzip, snappy, lz4: kafkajs
// has no zstd codec) a producer sends keyed/null-key records, a null value, an empty value,
// headers with repeated names, explicit partitions and timestamps (kafkajs cannot send a null
// header value: sizeOfHeaders throws on null, so those headers are left out); every partition
// is read back from the beginning and from a given offset with kafkajs's own Fetch request on
// the partition leader (kafkajs's only consumer is a group consumer: this is its assign-style
// path, same request and decoder); ListOffsets earliest, latest and by timestamp (admin);
// DeleteTopics and the topic is gone from Metadata.
//
// kafkajs gives headers back as an object (a repeated name becomes an array of values, in
// order), so headers are compared in that form.
'use strict'
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

const PARTITIONS = 3
const CODECS = [['none', CompressionTypes.None], ['gzip', CompressionTypes.GZIP],
  ['snappy', CompressionTypes.Snappy], ['lz4', CompressionTypes.LZ4]]
const BINARY = Buffer.from([...Array(256).keys()])

const KEEP_GOING = process.env.CLIENT_SUITE_KEEP_GOING === '1'
const failed = []
function fail (msg) {
  console.error(`FAIL: ${msg}`)
  process.exit(1)
}
function check (cond, msg) {
  if (cond) return
  if (KEEP_GOING) {
    console.error(`FAIL (continuing): ${msg}`)
    failed.push(msg)
  } else fail(msg)
}
function step (msg) {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${msg}`)
}

const bootstrap = process.env.BOOTSTRAP || fail('BOOTSTRAP (host:port[,host:port...]) is not set')
const prefix = process.env.TOPIC_PREFIX || `clients-${process.pid}-${Date.now()}`
const topic = `${prefix}-kafkajs`
const b = s => (s === null ? null : Buffer.from(s))

// [partition, key, value, headers [name, value]] per codec; mirrors common.py (null header
// values dropped)
function records (i, codec) {
  const main = i % PARTITIONS
  const other = (i + 1) % PARTITIONS
  return [
    [main, b('key-1'), b(`value-1 ${codec} the quick brown fox`), [['h', b('one')], ['h', b('two')], ['trace-id', b('0af7651916cd43dd')]]],
    [main, null, b(`value-2 ${codec} no key`), []],
    [main, b('key-3'), null, [['after-null', b('x')]]],
    [main, b('key-4'), b(''), [['empty', b('')]]],
    [main, BINARY, Buffer.concat([b(`value-5 ${codec} `), b('abcdefgh'.repeat(1024))]), [['h', b('one')], ['other', BINARY], ['h', b('three')]]],
    [other, b('key-6'), Buffer.concat([BINARY, BINARY, BINARY, BINARY]), []]
  ]
}
// kafkajs's header object form: a repeated name is an array of its values, in order
function headersObject (pairs) {
  const o = {}
  for (const [n, v] of pairs) {
    if (n in o) o[n] = [].concat(o[n], [v])
    else o[n] = v
  }
  return o
}
const show = v => (v === null || v === undefined ? String(v) : v.length > 40 ? `${JSON.stringify(v.subarray(0, 40).toString('latin1'))}...(${v.length} bytes)` : JSON.stringify(v.toString('latin1')))
const sameBytes = (a, e) => (a === null || e === null ? a === e : Buffer.isBuffer(a) && a.equals(e))
function sameHeaders (got, want) {
  const gk = Object.keys(got)
  const wk = Object.keys(want)
  if (JSON.stringify(gk) !== JSON.stringify(wk)) return false
  return wk.every(k => {
    const g = got[k]
    const w = want[k]
    if (Array.isArray(w)) return Array.isArray(g) && g.length === w.length && w.every((x, i) => sameBytes(g[i], x))
    return !Array.isArray(g) && sameBytes(g, w)
  })
}
const showHeaders = h => JSON.stringify(Object.fromEntries(Object.entries(h).map(([k, v]) => [k, Array.isArray(v) ? v.map(show) : show(v)])))

async function main () {
  const kafka = new Kafka({ clientId: 'clients-suite-kafkajs', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING, retry: { retries: 2 }, requestTimeout: 20000 })
  step(`kafkajs ${require('kafkajs/package.json').version}, bootstrap ${bootstrap}, topic ${topic}`)
  const admin = kafka.admin()
  await admin.connect()

  // --- create the topic and see it in Metadata ---------------------------------------
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }], waitForLeaders: true })
  } catch (e) { fail(`CreateTopics: ${e.message}`) }
  step('created topic')
  let md
  for (const deadline = Date.now() + 10000; ;) {
    try {
      md = (await admin.fetchTopicMetadata({ topics: [topic] })).topics.find(t => t.name === topic)
    } catch (e) { md = undefined; if (Date.now() > deadline) fail(`Metadata: ${e.message}`) }
    if (md && md.partitions.length === PARTITIONS) break
    if (Date.now() > deadline) fail(`Metadata: topic ${topic} not listed with ${PARTITIONS} partitions: ${JSON.stringify(md)}`)
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  const ids = md.partitions.map(p => p.partitionId).sort()
  check(JSON.stringify(ids) === JSON.stringify([0, 1, 2]), `Metadata: partition ids ${ids}`)
  for (const p of md.partitions) check(p.partitionErrorCode === 0 && p.leader >= 0, `Metadata: partition ${JSON.stringify(p)}`)
  check((await admin.listTopics()).includes(topic), `Metadata (listTopics) does not list ${topic}`)
  step(`metadata lists ${topic} with ${PARTITIONS} partitions`)

  // --- produce ----------------------------------------------------------------------------
  const expected = { 0: [], 1: [], 2: [] }
  let nextTs = Date.now() - 10 * 60 * 1000
  for (const [i, [codec, ctype]] of CODECS.entries()) {
    const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false, maxInFlightRequests: 1 })
    await producer.connect()
    const messages = records(i, codec).map(([partition, key, value, headers]) => {
      const timestamp = nextTs
      nextTs += 1000
      expected[partition].push({ key, value, headers: headersObject(headers), timestamp })
      return { partition, key, value, headers: headersObject(headers), timestamp: String(timestamp) }
    })
    try {
      const res = await producer.send({ topic, acks: -1, compression: ctype, messages })
      for (const r of res) check(r.errorCode === 0, `Produce codec=${codec}: ${JSON.stringify(r)}`)
    } catch (e) { fail(`Produce codec=${codec}: ${e.message}`) }
    await producer.disconnect()
    step(`produced codec=${codec}`)
  }

  // --- read back, partition by partition, with kafkajs's Fetch on the leader -------------
  const createCluster = Object.getOwnPropertySymbols(kafka).find(s => s.description === 'private:Kafka:createCluster')
  const cluster = kafka[createCluster]({ allowAutoTopicCreation: false })
  await cluster.connect()
  await cluster.addTargetTopic(topic)
  await cluster.refreshMetadata()
  async function read (partition, start, count) {
    const leaders = cluster.findLeaderForPartitions(topic, [partition])
    const nodeId = Object.keys(leaders)[0]
    const broker = await cluster.findBroker({ nodeId })
    const got = []
    let offset = start
    const deadline = Date.now() + 20000
    while (Date.now() < deadline) {
      const resp = await broker.fetch({
        replicaId: -1,
        isolationLevel: 0,
        maxWaitTime: got.length >= count ? 300 : 100,
        minBytes: 1,
        maxBytes: 10485760,
        topics: [{ topic, partitions: [{ partition, fetchOffset: String(offset), maxBytes: 1048576 }] }]
      })
      const pr = resp.responses[0].partitions[0]
      check(pr.errorCode === 0, `Fetch partition ${partition} at ${offset}: error ${pr.errorCode}`)
      // a batch may start before the fetch offset: skip what was not asked for
      const msgs = pr.messages.filter(m => Number(m.offset) >= offset)
      for (const m of msgs) got.push(m)
      if (msgs.length) offset = Number(msgs[msgs.length - 1].offset) + 1
      else if (got.length >= count) break
    }
    return got
  }
  function compare (where, got, want, start) {
    check(got.length === want.length, `${where}: got ${got.length} records from offset ${start}, expected ${want.length}: offsets ${got.map(m => m.offset)}`)
    for (let i = 0; i < Math.min(got.length, want.length); i++) {
      const g = got[i]
      const w = want[i]
      const off = Number(g.offset)
      check(off === start + i, `${where}: record #${i} has offset ${off}, expected ${start + i} (offsets must be consecutive)`)
      check(sameBytes(g.key, w.key), `${where} offset ${off}: key ${show(g.key)}, expected ${show(w.key)}`)
      check(sameBytes(g.value, w.value), `${where} offset ${off}: value ${show(g.value)}, expected ${show(w.value)} (null and empty differ)`)
      check(sameHeaders(g.headers, w.headers), `${where} offset ${off}: headers ${showHeaders(g.headers)}, expected ${showHeaders(w.headers)}`)
      check(Number(g.timestamp) === w.timestamp, `${where} offset ${off}: timestamp ${g.timestamp}, expected ${w.timestamp}`)
    }
  }
  for (let p = 0; p < PARTITIONS; p++) {
    const want = expected[p]
    compare(`partition ${p} from beginning`, await read(p, 0, want.length), want, 0)
    const mid = Math.floor(want.length / 2)
    compare(`partition ${p} from offset ${mid}`, await read(p, mid, want.length - mid), want.slice(mid), mid)
    step(`partition ${p}: ${want.length} records read back from the beginning and from ${mid}`)
  }
  await cluster.disconnect()

  // --- list offsets -------------------------------------------------------------------------
  const offs = await admin.fetchTopicOffsets(topic)
  for (let p = 0; p < PARTITIONS; p++) {
    const o = offs.find(x => x.partition === p)
    const n = expected[p].length
    check(o && o.low === '0' && o.high === String(n), `ListOffsets partition ${p}: earliest/latest ${o && o.low}/${o && o.high}, expected 0/${n}`)
  }
  for (let p = 0; p < PARTITIONS; p++) {
    const want = expected[p]
    const k = Math.floor(want.length / 2)
    const tk = want[k].timestamp
    // kafkajs asks every partition at once and reports the latest offset when none matches
    for (const [ts, exp] of [[tk, k], [tk - 1, k], [want[0].timestamp - 5000, 0], [want[want.length - 1].timestamp, want.length - 1]]) {
      const r = await admin.fetchTopicOffsetsByTimestamp(topic, ts)
      const o = r.find(x => x.partition === p)
      check(o && o.offset === String(exp), `ListOffsets partition ${p} timestamp ${ts}: offset ${o && o.offset}, expected ${exp}`)
    }
  }
  step('ListOffsets: earliest, latest, by timestamp')

  // --- delete the topic -------------------------------------------------------------------
  try {
    await admin.deleteTopics({ topics: [topic], timeout: 15000 })
  } catch (e) { fail(`DeleteTopics: ${e.message}`) }
  for (const deadline = Date.now() + 10000; (await admin.listTopics()).includes(topic);) {
    if (Date.now() > deadline) fail(`Metadata still lists ${topic} 10 s after DeleteTopics`)
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  await admin.disconnect()
  step('deleted topic; gone from metadata')
  if (failed.length) fail(`kafkajs: ${failed.length} check(s) failed, first: ${failed[0]}`)
  console.log('OK kafkajs')
  process.exit(0)
}
main().catch(e => fail(`${e.name || 'Error'}: ${e.message}\n${e.stack}`))
