// Java Admin on consumer groups: listConsumerGroups, describeConsumerGroups,
// listConsumerGroupOffsets, deleteConsumerGroups.
//
// 1. A consumer of group G reads a 3-partition topic holding 4/2/0 records and commits 4
//    (with metadata "m0") and 2 on partitions 0 and 1.
// 2. While it is a member: G is listed (state STABLE, not simple); described as STABLE,
//    assignor `range`, one member with its client id, host and an assignment of all 3
//    partitions, coordinator node 0 or more; deleteConsumerGroups fails with
//    GroupNotEmptyException.
// 3. After it closes: listed EMPTY, described EMPTY with no members; offsets {0: 4 "m0",
//    1: 2}; a group never seen is described as DEAD.
// 4. deleteConsumerGroups([G]) succeeds; G is no longer listed and has no offsets.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.serialization.*;

public class JavaAdmin {
    static final long T0 = System.nanoTime();
    static void step(String m) { System.out.printf("[%7.2fs] %s%n", (System.nanoTime() - T0) / 1e9, m); }
    static void check(boolean c, String m) { if (!c) { System.err.println("FAIL: " + m); System.exit(1); } }

    public static void main(String[] args) throws Exception {
        String bootstrap = System.getenv("BOOTSTRAP");
        check(bootstrap != null, "BOOTSTRAP (host:port) is not set");
        String prefix = Optional.ofNullable(System.getenv("TOPIC_PREFIX")).orElse("groups-" + ProcessHandle.current().pid());
        String topic = prefix + "-java-admin", group = prefix + "-java-admin-group";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < 4; i++) p.send(new ProducerRecord<>(topic, 0, null, "p0-" + i)).get();
                for (int i = 0; i < 2; i++) p.send(new ProducerRecord<>(topic, 1, null, "p1-" + i)).get();
            }
            Properties cp = new Properties();
            cp.put("bootstrap.servers", bootstrap);
            cp.put("group.id", group);
            cp.put("client.id", "java-admin-probe");
            cp.put("enable.auto.commit", "false");
            cp.put("auto.offset.reset", "earliest");
            cp.put("session.timeout.ms", "10000");
            cp.put("heartbeat.interval.ms", "300");
            cp.put("partition.assignment.strategy", RangeAssignor.class.getName());
            KafkaConsumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
            c.subscribe(List.of(topic));
            int n = 0;
            long deadline = System.currentTimeMillis() + 30000;
            while (n < 6 && System.currentTimeMillis() < deadline) n += c.poll(Duration.ofMillis(200)).count();
            check(n == 6, "read " + n + " of 6 records");
            c.commitSync(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(4, "m0"),
                                new TopicPartition(topic, 1), new OffsetAndMetadata(2)));
            step("consumer read 6 records and committed 0:4 1:2");

            ConsumerGroupListing l = listed(admin, group);
            check(l != null && l.state().orElse(null) == ConsumerGroupState.STABLE && !l.isSimpleConsumerGroup(), "listed while active: " + l);
            ConsumerGroupDescription d = describe(admin, group);
            step("described while active: " + d);
            check(d.state() == ConsumerGroupState.STABLE && d.partitionAssignor().equals("range") && !d.isSimpleConsumerGroup(), "described: " + d);
            check(d.coordinator() != null && d.coordinator().id() >= 0, "coordinator " + d.coordinator());
            check(d.members().size() == 1, "members " + d.members());
            MemberDescription m = d.members().iterator().next();
            check(m.clientId().equals("java-admin-probe") && m.host().replace("/", "").startsWith("127.0.0.1"), "member " + m);
            Set<TopicPartition> want = Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1), new TopicPartition(topic, 2));
            check(m.assignment().topicPartitions().equals(want), "member assignment " + m.assignment());
            checkOffsets(admin, group, topic);
            try {
                admin.deleteConsumerGroups(List.of(group)).all().get();
                check(false, "deleting a group with a member succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof GroupNotEmptyException, "delete of an active group: " + e.getCause());
                step("delete of the active group refused: " + e.getCause().getClass().getSimpleName());
            }

            c.close();
            step("consumer closed");
            l = listed(admin, group);
            check(l != null && l.state().orElse(null) == ConsumerGroupState.EMPTY, "listed after close: " + l);
            d = describe(admin, group);
            check(d.state() == ConsumerGroupState.EMPTY && d.members().isEmpty(), "described after close: " + d);
            checkOffsets(admin, group, topic);
            step("listed and described as EMPTY with no members; offsets unchanged");
            d = describe(admin, prefix + "-no-such-group");
            check(d.state() == ConsumerGroupState.DEAD && d.members().isEmpty(), "an unknown group described as " + d);

            admin.deleteConsumerGroups(List.of(group)).all().get();
            step("deleteConsumerGroups of the empty group succeeded");
            check(listed(admin, group) == null, "the deleted group is still listed");
            Map<TopicPartition, OffsetAndMetadata> left = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            check(left.isEmpty(), "the deleted group still has offsets " + left);
        }
        step("OK java admin");
    }

    static ConsumerGroupListing listed(Admin admin, String group) throws Exception {
        for (ConsumerGroupListing l : admin.listConsumerGroups().all().get())
            if (l.groupId().equals(group)) return l;
        return null;
    }

    static ConsumerGroupDescription describe(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).all().get().get(group);
    }

    static void checkOffsets(Admin admin, String group, String topic) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        check(got.size() == 2, "offsets " + got);
        OffsetAndMetadata o0 = got.get(new TopicPartition(topic, 0)), o1 = got.get(new TopicPartition(topic, 1));
        check(o0 != null && o0.offset() == 4 && o0.metadata().equals("m0"), "partition 0: " + o0);
        check(o1 != null && o1.offset() == 2 && o1.metadata().isEmpty(), "partition 1: " + o1);
        step("listConsumerGroupOffsets: " + got);
    }
}
