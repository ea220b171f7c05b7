// Shared parts of the kafkajs consumer-group scripts: environment, steps, failure, topic.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const T0 = Date.now()
function step (msg) { console.log(`[${((Date.now() - T0) / 1000).toFixed(2).padStart(7)}s] ${msg}`) }
function fail (msg) { console.error(`FAIL: ${msg}`); process.exit(1) }
function check (cond, msg) { if (!cond) fail(msg) }
function env () {
  const bootstrap = process.env.BOOTSTRAP
  if (!bootstrap) fail('BOOTSTRAP (host:port) is not set')
  const prefix = process.env.TOPIC_PREFIX || `groups-${process.pid}-${Date.now()}`
  return { bootstrap, prefix }
}
function client (bootstrap, clientId) {
  return new Kafka({ clientId, brokers: bootstrap.split(','), logLevel: logLevel.ERROR, retry: { retries: 3 } })
}
async function createTopic (kafka, topic, partitions) {
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true })
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  check(md.topics[0].partitions.length === partitions, `${topic} has ${md.topics[0].partitions.length} partitions`)
  await admin.disconnect()
  step(`created ${topic} with ${partitions} partitions`)
}
const value = (p, i) => `p${p}-${i}`
async function waitUntil (what, cond, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  while (!(await cond())) {
    if (Date.now() > deadline) fail(`timed out after ${timeoutMs / 1000}s waiting for: ${what}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}
function run (name, main) {
  main().then(() => { step(`OK ${name}`); process.exit(0) },
    e => fail(`${name}: ${e && e.stack ? e.stack : e}`))
}
module.exports = { step, fail, check, env, client, createTopic, value, waitUntil, run }
