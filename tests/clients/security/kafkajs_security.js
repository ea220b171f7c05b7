#!/usr/bin/env node
// Security suite: kafkajs 2.2.4 over SASL_SSL with plain, scram-sha-256 and scram-sha-512.
//
// Env (set by apps/gateway/tests/support/security.rs): BOOTSTRAP (a SASL_SSL listener),
// TOPIC_PREFIX, CA_FILE, ADMIN_USER/ADMIN_PASSWORD (PLAIN super user), PLAIN_USER/
// PLAIN_PASSWORD, SCRAM_USER/SCRAM_PASSWORD (kafkajs has no admin call for SCRAM
// credentials: the harness creates them with `users set-scram`).
// The admin creates one topic per mechanism (3 partitions); per mechanism a producer sends
// keyed records to every partition, a group consumer (its own group) reads them all, and the
// admin finds the group's committed offsets at the end of each partition. A wrong password
// must be refused with KafkaJSSASLAuthenticationError, not hang.
'use strict'
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const PARTITIONS = 3
const TIMEOUT_MS = 30000

function fail (msg) {
  console.error(`FAIL: ${msg}`)
  process.exit(1)
}
function check (cond, msg) {
  if (!cond) fail(msg)
}
function step (msg) {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${msg}`)
}
function need (name) {
  return process.env[name] || fail(`${name} is not set (the harness in apps/gateway/tests/support/security.rs sets it)`)
}

const bootstrap = need('BOOTSTRAP')
const prefix = process.env.TOPIC_PREFIX || `security-${process.pid}-${Date.now()}`
const ca = [fs.readFileSync(need('CA_FILE'))]
const admin = { username: need('ADMIN_USER'), password: need('ADMIN_PASSWORD') }
const plain = { username: need('PLAIN_USER'), password: need('PLAIN_PASSWORD') }
const scram = { username: need('SCRAM_USER'), password: need('SCRAM_PASSWORD') }

function client (label, mechanism, creds) {
  return new Kafka({
    clientId: `security-kafkajs-${label}`,
    brokers: bootstrap.split(','),
    ssl: { ca },
    sasl: { mechanism, ...creds },
    logLevel: logLevel.NOTHING,
    connectionTimeout: 10000,
    requestTimeout: TIMEOUT_MS,
    retry: { retries: 3 }
  })
}
const topicOf = label => `${prefix}-kafkajs-${label}`

function records (label) {
  return [...Array(6).keys()].map(i => ({
    partition: i % PARTITIONS, key: `${label}-key-${i}`, value: `${label}-value-${i}`
  }))
}

async function roundTrip (label, mechanism, creds, adminClient) {
  const topic = topicOf(label)
  const want = records(label)
  const kafka = client(label, mechanism, creds)
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({
    topic,
    acks: -1,
    messages: want.map(r => ({ partition: r.partition, key: r.key, value: r.value }))
  })
  await producer.disconnect()

  const groupId = `${prefix}-kafkajs-${label}-group`
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${label}: read ${got.length} of ${want.length} records within ${TIMEOUT_MS} ms`)), TIMEOUT_MS)
    consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, key: message.key.toString(), value: message.value.toString() })
        if (got.length >= want.length) {
          clearTimeout(timer)
          resolve()
        }
      }
    }).catch(reject)
  }).catch(e => fail(e.message))
  await consumer.disconnect() // commits what was consumed
  const norm = rows => rows.map(r => `${r.partition}|${r.key}|${r.value}`).sort()
  check(JSON.stringify(norm(got)) === JSON.stringify(norm(want)),
    `${label}: consumed ${JSON.stringify(norm(got))}, expected ${JSON.stringify(norm(want))}`)

  const offsets = await adminClient.fetchOffsets({ groupId, topics: [topic] })
  const committed = Object.fromEntries(offsets[0].partitions.map(p => [p.partition, Number(p.offset)]))
  const counts = Object.fromEntries([...Array(PARTITIONS).keys()].map(p => [p, want.filter(r => r.partition === p).length]))
  check(JSON.stringify(committed) === JSON.stringify(counts),
    `${label}: committed offsets ${JSON.stringify(committed)}, expected ${JSON.stringify(counts)}`)
  step(`${label}: ${want.length} records produced and consumed by group ${groupId}`)
}

async function refused (label, mechanism, creds) {
  const started = Date.now()
  const producer = client(label, mechanism, creds).producer()
  try {
    await producer.connect()
  } catch (e) {
    check(e.name === 'KafkaJSSASLAuthenticationError' || (e.originalError && e.originalError.name === 'KafkaJSSASLAuthenticationError'),
      `${label}: expected KafkaJSSASLAuthenticationError, got ${e.name}: ${e.message}`)
    step(`${label}: refused after ${((Date.now() - started) / 1000).toFixed(1)}s (${e.name})`)
    return
  }
  await producer.disconnect()
  fail(`${label}: the producer connected`)
}

async function main () {
  const labels = [['plain', 'plain', plain], ['scram-sha-256', 'scram-sha-256', scram], ['scram-sha-512', 'scram-sha-512', scram]]
  const adminClient = client('admin', 'plain', admin).admin()
  await adminClient.connect()
  const created = await adminClient.createTopics({
    waitForLeaders: true,
    topics: labels.map(([label]) => ({ topic: topicOf(label), numPartitions: PARTITIONS, replicationFactor: 1 }))
  })
  check(created, 'createTopics reported that a topic already exists')
  step(`topics created as ${admin.username}`)
  for (const [label, mechanism, creds] of labels) {
    await roundTrip(label, mechanism, creds, adminClient)
  }
  await adminClient.disconnect()
  await refused('wrong PLAIN password', 'plain', { username: plain.username, password: `not-${plain.password}` })
  console.log('OK kafkajs security')
}

main().then(() => process.exit(0), e => fail(`${e.name}: ${e.message}`))
