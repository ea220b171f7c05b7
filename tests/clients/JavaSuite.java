// Client suite: Apache kafka-clients 3.9.1 (Java 17), the reference client.
//
// Run: BOOTSTRAP=host:port[,host:port...] TOPIC_PREFIX=... java -cp '.clients/java/jars/*' tests/clients/JavaSuite.java
// Admin CreateTopics (3 partitions) and Metadata (describeTopics, listTopics); per codec (none,
// gzip, snappy, lz4, zstd) a producer with the default configuration (idempotent, so
// InitProducerId) sends keyed/null-key records, a null value, an empty value, headers with
// repeated names and a null value, explicit partitions and timestamps; an assign-style consumer
// (no group) reads every partition back from the beginning and from a given offset; ListOffsets
// earliest, latest and by timestamp (consumer and admin); DeleteTopics and the topic is gone
// from Metadata.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class JavaSuite {
    static final int PARTITIONS = 3;
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final byte[] BINARY = new byte[256];
    static {
        for (int i = 0; i < 256; i++) BINARY[i] = (byte) i;
    }
    static final boolean KEEP_GOING = "1".equals(System.getenv("CLIENT_SUITE_KEEP_GOING"));
    static final List<String> FAILED = new ArrayList<>();

    record H(String name, byte[] value) {}

    record Rec(int partition, byte[] key, byte[] value, List<H> headers, long ts) {}

    static void fail(String msg) {
        System.err.println("FAIL: " + msg);
        System.err.flush();
        System.exit(1);
    }

    static void check(boolean cond, String msg) {
        if (cond) return;
        if (KEEP_GOING) {
            System.err.println("FAIL (continuing): " + msg);
            FAILED.add(msg);
        } else {
            fail(msg);
        }
    }

    static void step(String msg) {
        System.out.println("[" + LocalTime.now().format(DateTimeFormatter.ofPattern("HH:mm:ss")) + "] " + msg);
        System.out.flush();
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static byte[] concat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) n += p.length;
        byte[] out = new byte[n];
        int at = 0;
        for (byte[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    static String show(byte[] v) {
        if (v == null) return "null";
        String s = new String(v, 0, Math.min(v.length, 40), StandardCharsets.ISO_8859_1);
        return v.length > 40 ? "\"" + s + "\"...(" + v.length + " bytes)" : "\"" + s + "\"";
    }

    static String showHeaders(List<H> hs) {
        List<String> out = new ArrayList<>();
        for (H h : hs) out.add(h.name() + "=" + show(h.value()));
        return out.toString();
    }

    // the records for one codec (mirrors tests/clients/common.py)
    static List<Rec> records(int i, String codec) {
        int main = i % PARTITIONS;
        int other = (i + 1) % PARTITIONS;
        return List.of(
            new Rec(main, b("key-1"), b("value-1 " + codec + " the quick brown fox"),
                    List.of(new H("h", b("one")), new H("h", b("two")), new H("trace-id", b("0af7651916cd43dd"))), 0),
            new Rec(main, null, b("value-2 " + codec + " no key"), List.of(), 0),
            new Rec(main, b("key-3"), null, Arrays.asList(new H("nullable", null), new H("after-null", b("x"))), 0),
            new Rec(main, b("key-4"), new byte[0], List.of(new H("empty", new byte[0])), 0),
            new Rec(main, BINARY, concat(b("value-5 " + codec + " "), b("abcdefgh".repeat(1024))),
                    List.of(new H("h", b("one")), new H("other", BINARY), new H("h", b("three"))), 0),
            new Rec(other, b("key-6"), concat(BINARY, BINARY, BINARY, BINARY), List.of(), 0));
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = System.getenv("BOOTSTRAP");
        if (bootstrap == null || bootstrap.isEmpty()) fail("BOOTSTRAP (host:port[,host:port...]) is not set");
        String prefix = Objects.requireNonNullElse(System.getenv("TOPIC_PREFIX"), "clients-" + ProcessHandle.current().pid());
        String topic = prefix + "-java";
        step("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion() + ", bootstrap " + bootstrap + ", topic " + topic);
        Properties base = new Properties();
        base.put("bootstrap.servers", bootstrap);
        base.put("client.id", "clients-suite-java");
        base.put("request.timeout.ms", "20000");
        base.put("default.api.timeout.ms", "30000");

        try (Admin admin = Admin.create(base)) {
            // --- create the topic and see it in Metadata --------------------------------
            try {
                admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                fail("CreateTopics: " + e);
            }
            step("created topic");
            TopicDescription d = null;
            long deadline = System.currentTimeMillis() + 10_000;
            while (true) {
                try {
                    d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) fail("Metadata (describeTopics): " + e);
                }
                if (d != null && d.partitions().size() == PARTITIONS) break;
                if (System.currentTimeMillis() > deadline) fail("Metadata: topic " + topic + " not listed with " + PARTITIONS + " partitions: " + d);
                Thread.sleep(200);
            }
            for (int p = 0; p < PARTITIONS; p++) {
                var tpi = d.partitions().get(p);
                check(tpi.partition() == p, "Metadata: partition #" + p + " has id " + tpi.partition());
                check(tpi.leader() != null && tpi.leader().id() >= 0, "Metadata: partition " + p + " has no leader");
            }
            check(admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic), "Metadata (listTopics) does not list " + topic);
            step("metadata lists " + topic + " with " + PARTITIONS + " partitions");

            // --- produce ----------------------------------------------------------------
            Map<Integer, List<Rec>> expected = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) expected.put(p, new ArrayList<>());
            long nextTs = System.currentTimeMillis() - 10 * 60 * 1000;
            for (int i = 0; i < CODECS.length; i++) {
                String codec = CODECS[i];
                Properties pp = new Properties();
                pp.putAll(base);
                pp.put("compression.type", codec);
                pp.put("linger.ms", "50");
                pp.put("acks", "all");
                pp.put("delivery.timeout.ms", "30000");
                pp.put("key.serializer", ByteArraySerializer.class.getName());
                pp.put("value.serializer", ByteArraySerializer.class.getName());
                try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
                    List<Future<RecordMetadata>> futures = new ArrayList<>();
                    List<Integer> parts = new ArrayList<>();
                    for (Rec r : records(i, codec)) {
                        long ts = nextTs;
                        nextTs += 1000;
                        List<Header> hs = new ArrayList<>();
                        for (H h : r.headers()) hs.add(new RecordHeader(h.name(), h.value()));
                        futures.add(producer.send(new ProducerRecord<>(topic, r.partition(), ts, r.key(), r.value(), hs)));
                        parts.add(r.partition());
                        expected.get(r.partition()).add(new Rec(r.partition(), r.key(), r.value(), r.headers(), ts));
                    }
                    producer.flush();
                    for (int k = 0; k < futures.size(); k++) {
                        try {
                            RecordMetadata md = futures.get(k).get(30, TimeUnit.SECONDS);
                            check(md.partition() == parts.get(k), "Produce codec=" + codec + ": landed in " + md.partition() + ", not " + parts.get(k));
                        } catch (Exception e) {
                            fail("Produce codec=" + codec + " partition " + parts.get(k) + ": " + e);
                        }
                    }
                }
                step("produced codec=" + codec);
            }

            // --- consume, partition by partition, assign-style ----------------------------
            Properties cp = new Properties();
            cp.putAll(base);
            cp.put("enable.auto.commit", "false");
            cp.put("auto.offset.reset", "none");
            cp.put("fetch.max.wait.ms", "100");
            cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
            cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
                for (int p = 0; p < PARTITIONS; p++) {
                    List<Rec> want = expected.get(p);
                    compare(topic, consumer, p, -1, want, "partition " + p + " from beginning");
                    int mid = want.size() / 2;
                    compare(topic, consumer, p, mid, want.subList(mid, want.size()), "partition " + p + " from offset " + mid);
                    step("partition " + p + ": " + want.size() + " records read back from the beginning and from " + mid);
                }

                // --- list offsets -----------------------------------------------------------
                List<TopicPartition> tps = new ArrayList<>();
                for (int p = 0; p < PARTITIONS; p++) tps.add(new TopicPartition(topic, p));
                Map<TopicPartition, Long> earliest = consumer.beginningOffsets(tps);
                Map<TopicPartition, Long> latest = consumer.endOffsets(tps);
                for (TopicPartition tp : tps) {
                    int n = expected.get(tp.partition()).size();
                    check(earliest.get(tp) == 0 && latest.get(tp) == n,
                          "ListOffsets partition " + tp.partition() + ": earliest/latest " + earliest.get(tp) + "/" + latest.get(tp) + ", expected 0/" + n);
                }
                for (TopicPartition tp : tps) {
                    List<Rec> want = expected.get(tp.partition());
                    int k = want.size() / 2;
                    long tk = want.get(k).ts();
                    long[][] queries = {{tk, k}, {tk - 1, k}, {want.get(0).ts() - 5000, 0},
                                        {want.get(want.size() - 1).ts(), want.size() - 1},
                                        {want.get(want.size() - 1).ts() + 1, -1}};
                    for (long[] q : queries) {
                        OffsetAndTimestamp r = consumer.offsetsForTimes(Map.of(tp, q[0])).get(tp);
                        long got = r == null ? -1 : r.offset();
                        check(got == q[1], "ListOffsets partition " + tp.partition() + " timestamp " + q[0] + ": offset " + got + ", expected " + q[1]);
                        if (r != null && q[1] >= 0) {
                            long wts = want.get((int) q[1]).ts();
                            check(r.timestamp() == wts, "ListOffsets partition " + tp.partition() + " timestamp " + q[0] + ": returned timestamp " + r.timestamp() + ", expected " + wts);
                        }
                    }
                }
                step("consumer ListOffsets: earliest, latest, by timestamp");
            }
            for (int p = 0; p < PARTITIONS; p++) {
                TopicPartition tp = new TopicPartition(topic, p);
                List<Rec> want = expected.get(p);
                long e = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get(30, TimeUnit.SECONDS).offset();
                long l = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get(30, TimeUnit.SECONDS).offset();
                long t = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(want.get(1).ts()))).partitionResult(tp).get(30, TimeUnit.SECONDS).offset();
                check(e == 0 && l == want.size() && t == 1,
                      "admin ListOffsets partition " + p + ": earliest/latest/by-timestamp " + e + "/" + l + "/" + t + ", expected 0/" + want.size() + "/1");
            }
            step("admin ListOffsets: earliest, latest, by timestamp");

            // --- delete the topic ---------------------------------------------------------
            try {
                admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                fail("DeleteTopics: " + e);
            }
            deadline = System.currentTimeMillis() + 10_000;
            while (admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic)) {
                if (System.currentTimeMillis() > deadline) fail("Metadata still lists " + topic + " 10 s after DeleteTopics");
                Thread.sleep(200);
            }
            step("deleted topic; gone from metadata");
        }
        if (!FAILED.isEmpty()) fail("java: " + FAILED.size() + " check(s) failed, first: " + FAILED.get(0));
        System.out.println("OK java");
        System.exit(0);
    }

    // assign one partition, seek (start < 0: to the beginning), read want.size() records, make
    // sure nothing more follows, and compare
    static void compare(String topic, KafkaConsumer<byte[], byte[]> consumer, int p, long start, List<Rec> want, String where) {
        TopicPartition tp = new TopicPartition(topic, p);
        consumer.assign(List.of(tp));
        if (start < 0) consumer.seekToBeginning(List.of(tp));
        else consumer.seek(tp, start);
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 20_000;
        while (got.size() < want.size() && System.currentTimeMillis() < deadline) {
            for (var r : consumer.poll(Duration.ofMillis(300))) got.add(r);
        }
        for (var r : consumer.poll(Duration.ofMillis(500))) got.add(r);
        long first = start < 0 ? 0 : start;
        List<Long> offsets = new ArrayList<>();
        for (var r : got) offsets.add(r.offset());
        check(got.size() == want.size(), where + ": got " + got.size() + " records from offset " + first + ", expected " + want.size() + ": offsets " + offsets);
        for (int i = 0; i < Math.min(got.size(), want.size()); i++) {
            var g = got.get(i);
            Rec w = want.get(i);
            long off = g.offset();
            check(off == first + i, where + ": record #" + i + " has offset " + off + ", expected " + (first + i) + " (offsets must be consecutive)");
            check(Arrays.equals(g.key(), w.key()), where + " offset " + off + ": key " + show(g.key()) + ", expected " + show(w.key()));
            check(Arrays.equals(g.value(), w.value()), where + " offset " + off + ": value " + show(g.value()) + ", expected " + show(w.value()) + " (null and empty differ)");
            List<H> hs = new ArrayList<>();
            for (Header h : g.headers()) hs.add(new H(h.key(), h.value()));
            boolean same = hs.size() == w.headers().size();
            for (int k = 0; same && k < hs.size(); k++) {
                same = hs.get(k).name().equals(w.headers().get(k).name()) && Arrays.equals(hs.get(k).value(), w.headers().get(k).value());
            }
            check(same, where + " offset " + off + ": headers " + showHeaders(hs) + ", expected " + showHeaders(w.headers()));
            check(g.timestampType() == TimestampType.CREATE_TIME && g.timestamp() == w.ts(),
                  where + " offset " + off + ": timestamp " + g.timestampType() + " " + g.timestamp() + ", expected CreateTime " + w.ts());
        }
    }
}
