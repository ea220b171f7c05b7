// Transactions with Apache kafka-clients 3.9.1 (Java 17).
//
// Run: BOOTSTRAP=host:port[,...] TOPIC_PREFIX=... java -cp '.clients/java/jars/*' tests/clients/txn/JavaTxn.java
// 1. A transactional producer commits, aborts and commits (records on all 3 partitions); a
//    read_committed consumer sees exactly the committed records in order, its end offsets
//    (the last stable offsets) reach the end of the log; read_uncommitted also sees the
//    aborted ones.
// 2. Consume-transform-produce: 30 input records; a read_committed group consumer turns each
//    batch into output records and commits its input offsets in the same transaction
//    (sendOffsetsToTransaction with groupMetadata()); one batch is aborted and re-read from
//    the committed offsets. The output holds each input exactly once, in input order per
//    partition; the group's committed offsets are the input ends.
// 3. Zombie fencing: producer A begins and writes; B (same transactional.id) initTransactions;
//    A's next send or commit fails with ProducerFencedException (or InvalidProducerEpoch),
//    none of A's records is visible to read_committed, B's committed record is.
// Exits 0 when all matched, 1 with a FAIL line otherwise (CLIENT_SUITE_KEEP_GOING=1: report
// every mismatch).
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaTxn {
    static final int P = 3;
    static final boolean KEEP_GOING = "1".equals(System.getenv("CLIENT_SUITE_KEEP_GOING"));
    static final List<String> FAILED = new ArrayList<>();
    static String bootstrap;

    static void step(String msg) {
        System.out.println("[" + LocalTime.now().format(DateTimeFormatter.ofPattern("HH:mm:ss")) + "] " + msg);
        System.out.flush();
    }

    static void fail(String msg) {
        System.err.println("FAIL: " + msg);
        System.err.flush();
        System.exit(1);
    }

    static boolean check(boolean cond, String msg) {
        if (!cond) {
            if (!KEEP_GOING) fail(msg);
            System.err.println("FAIL (continuing): " + msg);
            FAILED.add(msg);
        }
        return cond;
    }

    static KafkaProducer<String, String> producer(String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("transaction.timeout.ms", "30000");
        p.put("linger.ms", "5");
        p.put("max.block.ms", "60000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String group, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        if (group != null) p.put("group.id", group);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("isolation.level", isolation);
        p.put("max.poll.records", "7");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    /** Every value of `topic` per partition, read with `isolation` up to the end offsets. */
    static Map<Integer, List<String>> readAll(String topic, String isolation) {
        Map<Integer, List<String>> out = new HashMap<>();
        for (int p = 0; p < P; p++) out.put(p, new ArrayList<>());
        try (KafkaConsumer<String, String> c = consumer(null, isolation)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < P; p++) tps.add(new TopicPartition(topic, p));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(20));
            long deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= c.position(tp, Duration.ofSeconds(20)) >= end.get(tp);
                if (done) break;
                if (System.currentTimeMillis() > deadline)
                    fail("read " + topic + " (" + isolation + "): end offsets " + end + " not reached");
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200)))
                    out.get(r.partition()).add(r.value());
            }
            // nothing beyond the end offsets
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500)))
                out.get(r.partition()).add(r.value());
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = System.getenv("BOOTSTRAP");
        if (bootstrap == null || bootstrap.isEmpty()) fail("BOOTSTRAP is not set");
        String prefix = Objects.requireNonNullElse(System.getenv("TOPIC_PREFIX"), "txn-" + ProcessHandle.current().pid());
        String simple = prefix + "-jtxn", in = prefix + "-jtxn-in", out = prefix + "-jtxn-out", zombie = prefix + "-jtxn-zombie";
        step("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion() + ", bootstrap " + bootstrap);
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            List<NewTopic> topics = new ArrayList<>();
            for (String t : List.of(simple, in, out, zombie)) topics.add(new NewTopic(t, P, (short) 1));
            admin.createTopics(topics).all().get(30, TimeUnit.SECONDS);
        }
        step("created topics");

        // --- 1. commit, abort, commit ---
        Map<Integer, List<String>> expected = new HashMap<>(), everything = new HashMap<>();
        for (int p = 0; p < P; p++) { expected.put(p, new ArrayList<>()); everything.put(p, new ArrayList<>()); }
        try (KafkaProducer<String, String> pr = producer(prefix + "-simple")) {
            pr.initTransactions();
            for (int txn = 1; txn <= 3; txn++) {
                boolean commit = txn != 2;
                pr.beginTransaction();
                for (int i = 0; i < 6; i++) {
                    String v = "txn" + txn + (commit ? "-c-" : "-a-") + i;
                    pr.send(new ProducerRecord<>(simple, i % P, "k" + i, v));
                    everything.get(i % P).add(v);
                    if (commit) expected.get(i % P).add(v);
                }
                pr.flush();
                if (commit) pr.commitTransaction(); else pr.abortTransaction();
                step("transaction " + txn + (commit ? " committed" : " aborted"));
            }
        }
        Map<Integer, List<String>> got = readAll(simple, "read_committed");
        if (check(got.equals(expected), "read_committed after commit/abort/commit: " + got + ", expected " + expected))
            step("read_committed sees exactly the committed records, up to the last stable offsets");
        got = readAll(simple, "read_uncommitted");
        if (check(got.equals(everything), "read_uncommitted: " + got + ", expected " + everything))
            step("read_uncommitted also sees the aborted records");

        // --- 2. consume-transform-produce ---
        final int n = 30;
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) plain.send(new ProducerRecord<>(in, i % P, "in" + i, "in-" + i)).get();
        }
        String group = prefix + "-jctp";
        int batches = 0, seen = 0;
        boolean aborted = false;
        try (KafkaConsumer<String, String> c = consumer(group, "read_committed");
             KafkaProducer<String, String> pr = producer(prefix + "-jctp")) {
            pr.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < n) {
                if (System.currentTimeMillis() > deadline) fail("consume-transform-produce: " + seen + " of " + n + " inputs in 60 s");
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                c.poll(Duration.ofMillis(500)).forEach(batch::add);
                if (batch.isEmpty()) continue;
                batches++;
                pr.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch) {
                    pr.send(new ProducerRecord<>(out, r.partition(), r.key(), "out-" + r.value()));
                    offsets.put(new TopicPartition(in, r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                pr.sendOffsetsToTransaction(offsets, c.groupMetadata());
                if (batches == 2 && !aborted) {
                    pr.flush();
                    pr.abortTransaction();
                    aborted = true;
                    Map<TopicPartition, OffsetAndMetadata> committed = c.committed(c.assignment(), Duration.ofSeconds(20));
                    for (TopicPartition tp : c.assignment()) {
                        OffsetAndMetadata om = committed.get(tp);
                        c.seek(tp, om == null ? 0 : om.offset());
                    }
                    step("aborted a batch of " + batch.size() + ", rewound to the committed offsets " + committed);
                    continue;
                }
                pr.commitTransaction();
                seen += batch.size();
            }
        }
        if (!aborted) fail("no batch was aborted");
        step("processed " + n + " inputs in " + batches + " transactions (one aborted)");
        Map<Integer, List<String>> outGot = readAll(out, "read_committed");
        List<String> all = new ArrayList<>(), want = new ArrayList<>();
        outGot.values().forEach(all::addAll);
        for (int i = 0; i < n; i++) want.add("out-in-" + i);
        Collections.sort(all);
        Collections.sort(want);
        boolean ok = check(all.equals(want), "output (read_committed) " + all + ", expected each input once " + want);
        for (Map.Entry<Integer, List<String>> e : outGot.entrySet()) {
            List<Integer> order = new ArrayList<>();
            for (String v : e.getValue()) order.add(Integer.parseInt(v.substring(v.lastIndexOf('-') + 1)));
            List<Integer> sorted = new ArrayList<>(order);
            Collections.sort(sorted);
            ok &= check(order.equals(sorted), "output partition " + e.getKey() + " out of input order: " + order);
        }
        if (ok) step("output holds every input exactly once, in input order per partition");
        try (Admin admin = Admin.create(ap)) {
            Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
            Map<Integer, Long> gotOffs = new HashMap<>(), wantOffs = new HashMap<>();
            offs.forEach((tp, om) -> { if (tp.topic().equals(in)) gotOffs.put(tp.partition(), om.offset()); });
            for (int p = 0; p < P; p++) wantOffs.put(p, (long) (n / P));
            if (check(gotOffs.equals(wantOffs), "group " + group + " committed " + gotOffs + ", expected the input ends " + wantOffs))
                step("group committed offsets are the input ends " + wantOffs);
        }

        // --- 3. zombie fencing ---
        String zid = prefix + "-jzombie";
        KafkaProducer<String, String> a = producer(zid);
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(zombie, 0, "z", "zombie-1")).get();
        a.send(new ProducerRecord<>(zombie, 1, "z", "zombie-2")).get();
        try (KafkaProducer<String, String> b = producer(zid)) {
            b.initTransactions();
            step("second producer with the same transactional.id initialised");
            b.beginTransaction();
            b.send(new ProducerRecord<>(zombie, 0, "n", "new-1"));
            b.commitTransaction();
        }
        Throwable fenced = null;
        try {
            a.send(new ProducerRecord<>(zombie, 2, "z", "zombie-3")).get();
            a.commitTransaction();
        } catch (ExecutionException e) {
            fenced = e.getCause();
        } catch (KafkaException e) {
            fenced = e;
        }
        while (fenced != null && !(fenced instanceof ProducerFencedException || fenced instanceof InvalidProducerEpochException)
                && fenced.getCause() != null && fenced.getCause() != fenced)
            fenced = fenced.getCause();
        if (fenced == null) fail("the fenced producer's send and commit succeeded");
        check(fenced instanceof ProducerFencedException || fenced instanceof InvalidProducerEpochException,
              "the fenced producer failed with " + fenced + ", expected ProducerFencedException or InvalidProducerEpochException");
        step("the older producer is fenced: " + fenced.getClass().getSimpleName());
        a.close(Duration.ofSeconds(5));
        got = readAll(zombie, "read_committed");
        Map<Integer, List<String>> want3 = Map.of(0, List.of("new-1"), 1, List.of(), 2, List.of());
        if (check(got.equals(want3), "read_committed after fencing: " + got + ", expected only new-1"))
            step("none of the fenced producer's records is visible");
        if (!FAILED.isEmpty()) fail(FAILED.size() + " check(s) failed, first: " + FAILED.get(0));
        System.out.println("OK java kafka-clients transactions");
        System.exit(0);
    }
}
