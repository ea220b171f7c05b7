// Java kafka-clients, static membership (KIP-345, group.instance.id): a member restarted
// within its session timeout gets its assignment back without a rebalance of the others.
//
// 1. Static members S1 and S2 (group.instance.id "s1", "s2"; session timeout 10 s; default
//    assignors, so the eager RangeAssignor) split a 4-partition topic.
// 2. S1 closes (a static member sends no LeaveGroup) and a new consumer with instance id
//    "s1" starts at once, well inside the session timeout.
// 3. The new S1 is assigned exactly what the old one had; S2 sees no onPartitionsRevoked
//    and no onPartitionsAssigned during the restart and for 2 s after it (an eager rebalance
//    would revoke everything S2 owns).
// 4. The group is still Stable with the two instance ids (Admin.describeConsumerGroups).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class JavaStatic {
    static final long T0 = System.nanoTime();
    static void step(String m) { System.out.printf("[%7.2fs] %s%n", (System.nanoTime() - T0) / 1e9, m); }
    static void check(boolean c, String m) { if (!c) { System.err.println("FAIL: " + m); System.exit(1); } }
    static String bootstrap, topic, group;

    static class Member implements ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> c;
        final Set<Integer> owned = new TreeSet<>();
        int revokes, assigns;

        Member(String name, String instance) {
            this.name = name;
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", group);
            p.put("group.instance.id", instance);
            p.put("client.id", name);
            p.put("enable.auto.commit", "false");
            p.put("auto.offset.reset", "earliest");
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "300");
            c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
            c.subscribe(List.of(topic), this);
        }

        @Override public void onPartitionsAssigned(Collection<TopicPartition> tps) {
            assigns++;
            for (TopicPartition tp : tps) owned.add(tp.partition());
            step(name + ": onPartitionsAssigned " + tps);
        }

        @Override public void onPartitionsRevoked(Collection<TopicPartition> tps) {
            revokes++;
            for (TopicPartition tp : tps) owned.remove(tp.partition());
            step(name + ": onPartitionsRevoked " + tps);
        }

        void poll() { c.poll(Duration.ofMillis(20)); }
    }

    static boolean split(Member a, Member b) {
        Set<Integer> all = new TreeSet<>(a.owned);
        all.addAll(b.owned);
        return !a.owned.isEmpty() && !b.owned.isEmpty() && all.size() == 4 && a.owned.size() + b.owned.size() == 4;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = System.getenv("BOOTSTRAP");
        check(bootstrap != null, "BOOTSTRAP (host:port) is not set");
        String prefix = Optional.ofNullable(System.getenv("TOPIC_PREFIX")).orElse("groups-" + ProcessHandle.current().pid());
        topic = prefix + "-java-static";
        group = prefix + "-java-static-group";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get();
            step("created " + topic);
            Member s1 = new Member("S1", "s1"), s2 = new Member("S2", "s2");
            long deadline = System.currentTimeMillis() + 30000;
            while (!split(s1, s2)) {
                check(System.currentTimeMillis() < deadline, "S1 " + s1.owned + " and S2 " + s2.owned + " did not split the partitions");
                s1.poll();
                s2.poll();
            }
            long end = System.currentTimeMillis() + 1500;
            while (System.currentTimeMillis() < end) { s1.poll(); s2.poll(); }
            check(split(s1, s2), "the split did not hold: S1 " + s1.owned + " S2 " + s2.owned);
            Set<Integer> s1Had = new TreeSet<>(s1.owned), s2Had = new TreeSet<>(s2.owned);
            step("split: S1=" + s1Had + " S2=" + s2Had);

            int s2Revokes = s2.revokes, s2Assigns = s2.assigns;
            s1.c.close(Duration.ofSeconds(5));
            step("S1 closed (static: no LeaveGroup)");
            Member s1b = new Member("S1'", "s1");
            deadline = System.currentTimeMillis() + 9000;
            while (s1b.owned.isEmpty()) {
                check(System.currentTimeMillis() < deadline, "the restarted S1 got no assignment within 9 s");
                s1b.poll();
                s2.poll();
            }
            step("restarted S1 assigned " + s1b.owned);
            end = System.currentTimeMillis() + 2000;
            while (System.currentTimeMillis() < end) { s1b.poll(); s2.poll(); }
            check(s1b.owned.equals(s1Had), "the restarted S1 owns " + s1b.owned + ", before the restart " + s1Had);
            check(s2.revokes == s2Revokes, "S2's onPartitionsRevoked was called during S1's restart");
            check(s2.assigns == s2Assigns, "S2's onPartitionsAssigned was called during S1's restart");
            check(s2.owned.equals(s2Had), "S2 owns " + s2.owned + ", before " + s2Had);
            step("S2 was not rebalanced: still " + s2.owned);

            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            Set<String> instances = new TreeSet<>();
            for (MemberDescription m : d.members()) instances.add(m.groupInstanceId().orElse("-"));
            check(d.state() == ConsumerGroupState.STABLE && instances.equals(Set.of("s1", "s2")),
                  "described as " + d.state() + " with instances " + instances);
            step("described: " + d.state() + " instances " + instances);
            s1b.c.close(Duration.ofSeconds(5));
            s2.c.close(Duration.ofSeconds(5));
        }
        step("OK java static membership");
    }
}
