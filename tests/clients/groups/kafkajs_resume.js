// kafkajs: join, consume, commit, close; a new consumer of the same group resumes exactly
// after the commit. Default assignor (round robin), autoCommit off.
//
// 1. 10 records go to each of 3 partitions.
// 2. Consumer 1 (group G, fromBeginning) takes the first 13 records it is given (the rest
//    of those batches are not processed), commits the next offset of each partition it
//    took from (commitOffsets) and disconnects (LeaveGroup).
// 3. admin.fetchOffsets shows those offsets.
// 4. Consumer 2 (group G) is given exactly the records from the committed offsets on, in
//    order per partition; nothing more within 1.5 s.
'use strict'
const { step, check, env, client, createTopic, value, waitUntil, run } = require('./kafkajs_common')

const PARTS = 3
const PER_PART = 10

run('kafkajs resume', async () => {
  const { bootstrap, prefix } = env()
  const topic = `${prefix}-kjs-resume`
  const group = `${prefix}-kjs-resume-group`
  const kafka = client(bootstrap, 'kjs-resume')
  await createTopic(kafka, topic, PARTS)
  const producer = kafka.producer()
  await producer.connect()
  const sent = {}
  for (let p = 0; p < PARTS; p++) {
    sent[p] = []
    for (let i = 0; i < PER_PART; i++) sent[p].push(value(p, i))
    await producer.send({ topic, messages: sent[p].map(v => ({ value: v, partition: p })) })
  }
  await producer.disconnect()
  step(`produced ${PER_PART} records to each of ${PARTS} partitions`)

  const consumer = async (name, onMessage) => {
    const c = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 })
    await c.connect()
    await c.subscribe({ topic, fromBeginning: true })
    await c.run({ autoCommit: false, eachMessage: async ({ partition, message }) => onMessage(partition, Number(message.offset), message.value.toString()) })
    return c
  }

  const first = []
  const c1 = await consumer('first', (p, off, v) => { if (first.length < 13) first.push([p, off, v]) })
  await waitUntil('the first consumer takes 13 records', () => first.length >= 13, 30000)
  const committed = {}
  for (const [p, off] of first) committed[p] = Math.max(committed[p] || 0, off + 1)
  await c1.commitOffsets(Object.entries(committed).map(([p, o]) => ({ topic, partition: Number(p), offset: String(o) })))
  step(`the first consumer took 13 records and committed ${JSON.stringify(committed)}`)
  await c1.disconnect()
  step('the first consumer disconnected')

  const admin = kafka.admin()
  await admin.connect()
  const fetched = await admin.fetchOffsets({ groupId: group, topics: [topic] })
  const got = {}
  for (const { partition, offset } of fetched[0].partitions) got[partition] = Number(offset)
  for (let p = 0; p < PARTS; p++) {
    const exp = committed[p] === undefined ? -1 : committed[p]
    check(got[p] === exp, `fetchOffsets partition ${p}: ${got[p]}, expected ${exp}`)
  }
  await admin.disconnect()

  const second = []
  const expected = PARTS * PER_PART - 13
  const c2 = await consumer('second', (p, off, v) => { second.push([p, off, v]) })
  await waitUntil(`the second consumer reads ${expected} records`, () => second.length >= expected, 30000)
  await new Promise(resolve => setTimeout(resolve, 1500))
  check(second.length === expected, `the second consumer read ${second.length} records, expected ${expected}`)
  for (let p = 0; p < PARTS; p++) {
    const start = committed[p] || 0
    const gotP = second.filter(r => r[0] === p).map(r => `${r[1]}:${r[2]}`)
    const expP = sent[p].slice(start).map((v, i) => `${start + i}:${v}`)
    check(JSON.stringify(gotP) === JSON.stringify(expP), `partition ${p}: the second consumer read ${gotP}, expected ${expP}`)
  }
  step(`the second consumer resumed exactly after the commit (${second.length} records)`)
  await c2.disconnect()
})
