#!/usr/bin/env node
// Fixture capture client: kafkajs 2.2.4 (+ kafkajs-snappy 1.1.0, kafkajs-lz4 1.2.1).
//
// Usage: NODE_PATH=.clients/node/node_modules node capture_kafkajs.js BOOTSTRAP
//        (SENT_FILE env: where to write the sent manifest)
// Admin CreateTopics (3 partitions), Metadata, one producer per codec (none, gzip, snappy,
// lz4; kafkajs has no built-in zstd and none was asked for), then a group consumer from the
// beginning, commit, disconnect. Same records as common.py.
'use strict'
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const fs = require('fs')
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

const CLIENT = 'kafkajs-2.2.4'
const VERSION = require('kafkajs/package.json').version
const bootstrap = process.argv[2]
const topic = 'fixtures-kafkajs-2-2-4'
const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy, lz4: CompressionTypes.LZ4 }

// [partition, key, value, headers([name, value] pairs in wire order)] -- mirrors common.py.
// kafkajs 2.2.4 cannot send a null header value (sizeOfHeaders calls Buffer.byteLength(null)
// and throws), so headers with a null value are dropped, as common.records(..., False) does.
function records (codec) {
  const recs = [
    [1, 'key-1', `value-1 ${codec} the quick brown fox`, [['h', 'one'], ['h', 'two'], ['trace-id', '0af7651916cd43dd']]],
    [1, null, `value-2 ${codec} no key`, []],
    [1, 'key-3', null, [['nullable', null]]],
    [1, 'key-4', '', []],
    [1, 'key-5', `value-5 ${codec} ` + 'abc'.repeat(8), [['h', 'one'], ['empty', '']]],
    [2, 'key-6', `value-6 ${codec} other partition`, []]
  ]
  return recs.map(([p, k, v, hs]) => [p, k, v, hs.filter(([, hv]) => hv !== null)])
}
// kafkajs takes headers as an object: a repeated name is an array of values
function headersObject (pairs) {
  const o = {}
  for (const [n, v] of pairs) {
    if (n in o) o[n] = [].concat(o[n], [v])
    else o[n] = v
  }
  return o
}
const hex = s => (s === null ? null : Buffer.from(s, 'utf8').toString('hex'))

async function main () {
  const kafka = new Kafka({ clientId: 'fixture-capture-kafkajs', brokers: [bootstrap], logLevel: logLevel.WARN, retry: { retries: 3 } })
  const admin = kafka.admin()
  await admin.connect()
  try {
    console.log('created:', await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true }))
  } catch (e) { console.error('createTopics:', e.message) }
  try {
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    console.log('metadata:', md.topics.map(t => [t.name, t.partitions.length]))
  } catch (e) { console.error('fetchTopicMetadata:', e.message) }
  await admin.disconnect()

  const manifest = { client: CLIENT, client_version: VERSION, topic, sent: [] }
  let total = 0
  for (const [codec, ctype] of Object.entries(CODECS)) {
    const producer = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    const recs = records(codec)
    // one send() = one Produce request carrying both partitions
    await producer.send({
      topic,
      acks: -1,
      compression: ctype,
      messages: recs.map(([partition, key, value, headers]) => ({ partition, key, value, headers: headersObject(headers) }))
    })
    for (const [partition, key, value, headers] of recs) {
      let entry = manifest.sent.find(e => e.codec === codec && e.partition === partition)
      if (!entry) { entry = { codec, partition, records: [] }; manifest.sent.push(entry) }
      entry.records.push({ key: hex(key), value: hex(value), headers: headers.map(([n, v]) => [n, hex(v)]) })
      total++
    }
    await producer.disconnect()
    console.log(`produced codec=${codec}`)
  }
  fs.writeFileSync(process.env.SENT_FILE, JSON.stringify(manifest, null, 1))

  const consumer = kafka.consumer({ groupId: 'fixtures-kafkajs-2-2-4-group', heartbeatInterval: 300, sessionTimeout: 10000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let got = 0
  const last = {}
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 30000)
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got++
        last[partition] = message.offset
        if (got >= total) { clearTimeout(timer); resolve() }
      }
    })
  })
  console.log(`consumed ${got}/${total}`)
  await consumer.commitOffsets(Object.entries(last).map(([p, o]) => ({ topic, partition: Number(p), offset: String(Number(o) + 1) })))
  await new Promise(resolve => setTimeout(resolve, 1000))
  await consumer.disconnect()
  process.exit(got === total ? 0 : 1)
}
main().catch(e => { console.error(e); process.exit(1) })
