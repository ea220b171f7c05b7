// Java kafka-clients with CooperativeStickyAssignor: incremental rebalances on a
// 4-partition topic, seen through ConsumerRebalanceListener.
//
// 1. C1 joins alone and owns all 4 partitions.
// 2. C2 joins: C1 gives up only some partitions (onPartitionsRevoked never with all 4), C2
//    gets them; disjoint, covering 0-3.
// 3. C3 joins: C1 and C2 only give partitions up (each keeps at least one); the three own
//    disjoint sets covering 0-3.
// 4. C3 closes (LeaveGroup): its partitions go to C1/C2 with no onPartitionsRevoked on
//    C1 or C2, and nobody's partitions are lost (onPartitionsLost never called).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class JavaCooperative {
    static final long T0 = System.nanoTime();
    static void step(String m) { System.out.printf("[%7.2fs] %s%n", (System.nanoTime() - T0) / 1e9, m); }
    static void check(boolean c, String m) { if (!c) { System.err.println("FAIL: " + m); System.exit(1); } }
    static final int PARTS = 4;
    static String bootstrap, topic, group;

    static class Member implements ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> c;
        final Set<Integer> owned = new TreeSet<>();
        final List<Set<Integer>> revoked = new ArrayList<>();
        boolean closed;

        Member(String name) {
            this.name = name;
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", group);
            p.put("client.id", name);
            p.put("enable.auto.commit", "false");
            p.put("auto.offset.reset", "earliest");
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "300");
            p.put("partition.assignment.strategy", CooperativeStickyAssignor.class.getName());
            c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
            c.subscribe(List.of(topic), this);
        }

        static Set<Integer> ids(Collection<TopicPartition> tps) {
            Set<Integer> s = new TreeSet<>();
            for (TopicPartition tp : tps) s.add(tp.partition());
            return s;
        }

        @Override public void onPartitionsAssigned(Collection<TopicPartition> tps) {
            Set<Integer> d = ids(tps);
            for (int p : d) check(!owned.contains(p), name + ": assigned " + p + " it already owns");
            owned.addAll(d);
            step(name + ": +" + d + " -> " + owned);
        }

        @Override public void onPartitionsRevoked(Collection<TopicPartition> tps) {
            Set<Integer> d = ids(tps);
            if (d.isEmpty()) return;
            owned.removeAll(d);
            revoked.add(d);
            step(name + ": -" + d + " -> " + owned);
        }

        @Override public void onPartitionsLost(Collection<TopicPartition> tps) {
            if (closed) return;
            check(false, name + ": partitions lost " + ids(tps));
        }

        void poll() {
            if (!closed) c.poll(Duration.ofMillis(20));
        }
    }

    static final List<Member> members = new ArrayList<>();

    static boolean covers(List<Member> live) {
        Set<Integer> all = new TreeSet<>();
        int n = 0;
        for (Member m : live) {
            if (m.owned.isEmpty()) return false;
            all.addAll(m.owned);
            n += m.owned.size();
        }
        return n == PARTS && all.size() == PARTS;
    }

    static String show(List<Member> live) {
        StringBuilder sb = new StringBuilder();
        for (Member m : live) sb.append(m.name).append('=').append(m.owned).append(' ');
        return sb.toString().trim();
    }

    static void pollAll() {
        for (Member m : members) m.poll();
        for (Member a : members) for (Member b : members)
            if (a != b && !a.closed && !b.closed)
                for (int p : a.owned) check(!b.owned.contains(p), a.name + " and " + b.name + " both own " + p);
    }

    static void settle(String what, List<Member> live) {
        long deadline = System.currentTimeMillis() + 30000;
        while (!covers(live)) {
            check(System.currentTimeMillis() < deadline, "timed out waiting for: " + what + " (" + show(live) + ")");
            pollAll();
        }
        long end = System.currentTimeMillis() + 1500;
        while (System.currentTimeMillis() < end) pollAll();
        check(covers(live), what + ": did not hold: " + show(live));
        step(what + ": " + show(live));
    }

    public static void main(String[] args) throws Exception {
        bootstrap = System.getenv("BOOTSTRAP");
        check(bootstrap != null, "BOOTSTRAP (host:port) is not set");
        String prefix = Optional.ofNullable(System.getenv("TOPIC_PREFIX")).orElse("groups-" + ProcessHandle.current().pid());
        topic = prefix + "-java-coop";
        group = prefix + "-java-coop-group";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, PARTS, (short) 1))).all().get();
        }
        step("created " + topic);
        Member c1 = new Member("C1");
        members.add(c1);
        settle("C1 alone owns every partition", List.of(c1));
        Member c2 = new Member("C2");
        members.add(c2);
        settle("C1 and C2 split", List.of(c1, c2));
        for (Set<Integer> d : c1.revoked) check(d.size() < PARTS, "C1 had all partitions revoked at once when C2 joined: " + c1.revoked);

        Map<String, Set<Integer>> before = Map.of("C1", new TreeSet<>(c1.owned), "C2", new TreeSet<>(c2.owned));
        Member c3 = new Member("C3");
        members.add(c3);
        settle("C1, C2 and C3 split", List.of(c1, c2, c3));
        for (Member m : List.of(c1, c2)) {
            check(!m.owned.isEmpty() && before.get(m.name).containsAll(m.owned),
                  m.name + " owned " + before.get(m.name) + " before C3 joined and " + m.owned + " after: it should only give some up");
        }
        int r1 = c1.revoked.size(), r2 = c2.revoked.size();
        Set<Integer> c1Before = new TreeSet<>(c1.owned), c2Before = new TreeSet<>(c2.owned);
        c3.closed = true;
        c3.c.close();
        step("C3 closed (LeaveGroup)");
        settle("C1 and C2 after C3 left", List.of(c1, c2));
        check(c1.revoked.size() == r1 && c2.revoked.size() == r2,
              "revokes on C1/C2 when C3 left: C1 " + c1.revoked.subList(r1, c1.revoked.size()) + " C2 " + c2.revoked.subList(r2, c2.revoked.size()));
        check(c1.owned.containsAll(c1Before) && c2.owned.containsAll(c2Before), "C1/C2 lost partitions when C3 left");
        c1.closed = true;
        c2.closed = true;
        c1.c.close();
        c2.c.close();
        step("OK java cooperative-sticky");
    }
}
