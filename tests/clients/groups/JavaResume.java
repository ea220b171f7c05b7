// Java kafka-clients: join, consume, commit, close; a new consumer of the same group resumes
// exactly after the commit. Default assignors ([RangeAssignor, CooperativeStickyAssignor]),
// auto commit off.
//
// 1. 10 records go to each of 3 partitions.
// 2. Consumer 1 (group G, subscribe) processes the first 13 records it polls, commitSync()s
//    the next offset of each partition it processed and closes (LeaveGroup).
// 3. committed() of a fresh consumer in G shows those offsets.
// 4. Consumer 2 (group G) reads exactly the records from the committed offsets on, in
//    order per partition; nothing more within 1.5 s.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class JavaResume {
    static final long T0 = System.nanoTime();
    static void step(String m) { System.out.printf("[%7.2fs] %s%n", (System.nanoTime() - T0) / 1e9, m); }
    static void check(boolean c, String m) { if (!c) { System.err.println("FAIL: " + m); System.exit(1); } }

    public static void main(String[] args) throws Exception {
        String bootstrap = System.getenv("BOOTSTRAP");
        check(bootstrap != null, "BOOTSTRAP (host:port) is not set");
        String prefix = Optional.ofNullable(System.getenv("TOPIC_PREFIX")).orElse("groups-" + ProcessHandle.current().pid());
        String topic = prefix + "-java-resume", group = prefix + "-java-resume-group";
        int parts = 3, perPart = 10;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, parts, (short) 1))).all().get();
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int part = 0; part < parts; part++)
                for (int i = 0; i < perPart; i++) p.send(new ProducerRecord<>(topic, part, null, "p" + part + "-" + i)).get();
        }
        step("produced " + perPart + " records to each of " + parts + " partitions of " + topic);

        Map<Integer, Long> committed = new TreeMap<>();
        int taken = 0;
        try (KafkaConsumer<String, String> c1 = consumer(bootstrap, group, "first")) {
            c1.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            while (taken < 13 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c1.poll(Duration.ofMillis(200))) {
                    if (taken == 13) break;
                    check(r.offset() == committed.getOrDefault(r.partition(), 0L),
                          "first consumer: partition " + r.partition() + " offset " + r.offset() + " out of order");
                    committed.put(r.partition(), r.offset() + 1);
                    taken++;
                }
            }
            check(taken == 13, "the first consumer read " + taken + " records, expected 13");
            Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
            committed.forEach((p, o) -> offs.put(new TopicPartition(topic, p), new OffsetAndMetadata(o)));
            c1.commitSync(offs);
            step("the first consumer processed 13 records and committed " + committed);
        }
        step("the first consumer closed");
        try (KafkaConsumer<String, String> probe = consumer(bootstrap, group, "probe")) {
            Set<TopicPartition> all = new HashSet<>();
            for (int p = 0; p < parts; p++) all.add(new TopicPartition(topic, p));
            Map<TopicPartition, OffsetAndMetadata> got = probe.committed(all);
            for (int p = 0; p < parts; p++) {
                OffsetAndMetadata om = got.get(new TopicPartition(topic, p));
                Long exp = committed.get(p);
                check(exp == null ? om == null : om != null && om.offset() == exp,
                      "committed() partition " + p + ": " + om + ", expected " + exp);
            }
        }
        List<String> second = new ArrayList<>();
        int expected = parts * perPart - 13;
        try (KafkaConsumer<String, String> c2 = consumer(bootstrap, group, "second")) {
            c2.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            while (second.size() < expected && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c2.poll(Duration.ofMillis(200))) second.add(r.partition() + "@" + r.offset() + "=" + r.value());
            long quiet = System.currentTimeMillis() + 1500;
            while (System.currentTimeMillis() < quiet)
                for (ConsumerRecord<String, String> r : c2.poll(Duration.ofMillis(200))) second.add(r.partition() + "@" + r.offset() + "=" + r.value());
        }
        check(second.size() == expected, "the second consumer read " + second.size() + " records, expected " + expected + ": " + second);
        for (int p = 0; p < parts; p++) {
            List<String> got = new ArrayList<>(), exp = new ArrayList<>();
            for (String s : second) if (s.startsWith(p + "@")) got.add(s);
            for (long o = committed.getOrDefault(p, 0L); o < perPart; o++) exp.add(p + "@" + o + "=p" + p + "-" + o);
            check(got.equals(exp), "partition " + p + ": the second consumer read " + got + ", expected " + exp);
        }
        step("the second consumer resumed exactly after the commit (" + second.size() + " records)");
        step("OK java resume");
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group, String name) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", name);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("session.timeout.ms", "10000");
        p.put("heartbeat.interval.ms", "500");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }
}
