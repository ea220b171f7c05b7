// kafkajs admin on consumer groups: listGroups, describeGroups, fetchOffsets, deleteGroups.
//
// 1. A consumer of group G reads a 3-partition topic holding 4/2/0 records and commits 4
//    and 2 on partitions 0 and 1.
// 2. While it is a member: listGroups has G with protocol type `consumer`; describeGroups
//    shows Stable, protocol type `consumer`, protocol `RoundRobinAssigner`, one member with
//    its client id and host and an assignment of all 3 partitions; deleteGroups fails
//    with NON_EMPTY_GROUP.
// 3. After it disconnects: Empty with no members; fetchOffsets gives 4, 2, -1.
// 4. deleteGroups([G]) succeeds; G is no longer listed and fetchOffsets gives -1 everywhere.
'use strict'
const { AssignerProtocol } = require('kafkajs')
const { step, check, fail, env, client, createTopic, value, waitUntil, run } = require('./kafkajs_common')

run('kafkajs admin', async () => {
  const { bootstrap, prefix } = env()
  const topic = `${prefix}-kjs-admin`
  const group = `${prefix}-kjs-admin-group`
  const kafka = client(bootstrap, 'kjs-admin-probe')
  await createTopic(kafka, topic, 3)
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: [0, 1, 2, 3].map(i => ({ value: value(0, i), partition: 0 })).concat([0, 1].map(i => ({ value: value(1, i), partition: 1 }))) })
  await producer.disconnect()

  const c = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 })
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  let n = 0
  await c.run({ autoCommit: false, eachMessage: async () => { n++ } })
  await waitUntil('the consumer reads 6 records', () => n >= 6, 30000)
  await c.commitOffsets([{ topic, partition: 0, offset: '4' }, { topic, partition: 1, offset: '2' }])
  step('consumer read 6 records and committed 0:4 1:2')

  const admin = kafka.admin()
  await admin.connect()
  const listed = async () => (await admin.listGroups()).groups.find(g => g.groupId === group)
  const describe = async () => (await admin.describeGroups([group])).groups[0]
  const offsets = async () => {
    const res = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    const out = {}
    for (const { partition, offset } of res[0].partitions) out[partition] = Number(offset)
    return JSON.stringify(out)
  }

  const l = await listed()
  check(l && l.protocolType === 'consumer', `listGroups: ${JSON.stringify(l)}`)
  const d = await describe()
  step(`describeGroups while active: ${d.state} ${d.protocolType} ${d.protocol}`)
  check(d.errorCode === 0 && d.state === 'Stable', `described state ${d.state} (error ${d.errorCode})`)
  check(d.protocolType === 'consumer' && d.protocol === 'RoundRobinAssigner', `protocol ${d.protocolType} ${d.protocol}`)
  check(d.members.length === 1, `members ${JSON.stringify(d.members)}`)
  const m = d.members[0]
  check(m.clientId === 'kjs-admin-probe', `member client id ${m.clientId}`)
  check(m.clientHost.replace(/^\//, '').startsWith('127.0.0.1'), `member host ${m.clientHost}`)
  const assignment = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
  check(JSON.stringify(assignment.assignment[topic].slice().sort()) === '[0,1,2]', `member assignment ${JSON.stringify(assignment)}`)
  check(await offsets() === '{"0":4,"1":2,"2":-1}', `offsets while active ${await offsets()}`)
  try {
    await admin.deleteGroups([group])
    fail('deleting a group with a member succeeded')
  } catch (e) {
    const err = e.groups ? e.groups[0].error : e
    check(err && err.type === 'NON_EMPTY_GROUP', `delete of an active group: ${e}`)
    step(`delete of the active group refused: ${err.type}`)
  }

  await c.disconnect()
  step('consumer disconnected')
  await waitUntil('described as Empty', async () => (await describe()).state === 'Empty', 15000)
  check((await describe()).members.length === 0, 'members after disconnect')
  check(await offsets() === '{"0":4,"1":2,"2":-1}', `offsets after disconnect ${await offsets()}`)
  step(`Empty with no members, offsets ${await offsets()}`)

  const res = await admin.deleteGroups([group])
  check(res.length === 1 && res[0].groupId === group && res[0].errorCode === 0, `deleteGroups ${JSON.stringify(res)}`)
  step('deleteGroups of the empty group succeeded')
  check(!(await listed()), 'deleted group still listed')
  check(await offsets() === '{"0":-1,"1":-1,"2":-1}', `deleted group offsets ${await offsets()}`)
  await admin.disconnect()
})
