// One Java producer for a fixed time, for runs that need the Java client's batches
// (it sends partition leader epoch -1; librdkafka, which kafka-bench drives, sends 0).
// Creates the topic (one partition), sends values of the given size with no key as fast
// as the producer takes them (acks=all, linger.ms 5, batch.size 1000000, no compression),
// and prints the bytes acknowledged as one JSON line. After the four arguments,
// `defaults` drops these settings (the client's own defaults then apply: idempotent,
// batch.size 16384, linger.ms 0 in 3.9), KEY=VALUE sets any producer property, last, and
// txn=N sends in transactions of N records each (transactional.id JavaProduce-<topic>
// unless set), committing each.
// With the clients installed by scripts/install-clients.sh:
//
//   javac -d /tmp/jp -cp ".clients/java/jars/*" apps/kafka-bench/java/JavaProduce.java
//   java -cp "/tmp/jp:.clients/java/jars/*" JavaProduce 127.0.0.1:9093 topic 1024 10
//   java -cp "/tmp/jp:.clients/java/jars/*" JavaProduce 127.0.0.1:9093 topic 1024 10 defaults
import java.util.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class JavaProduce {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        int size = Integer.parseInt(a[2]);
        double secs = Double.parseDouble(a[3]);
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        List<String> extra = Arrays.asList(a).subList(4, a.length);
        if (!extra.contains("defaults")) {
            p.put("acks", "all");
            p.put("linger.ms", "5");
            p.put("batch.size", "1000000");
            p.put("max.request.size", "2000000");
            p.put("buffer.memory", "268435456");
            p.put("compression.type", "none");
        }
        int perTxn = 0;
        for (String kv : extra) {
            int eq = kv.indexOf('=');
            if (kv.startsWith("txn=")) perTxn = Integer.parseInt(kv.substring(4));
            else if (eq > 0) p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        if (perTxn > 0) p.putIfAbsent("transactional.id", "JavaProduce-" + topic);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        byte[] value = new byte[size];
        new Random(1).nextBytes(value);
        AtomicLong acked = new AtomicLong(), errors = new AtomicLong();
        long start = System.nanoTime(), end = start + (long) (secs * 1e9);
        long txns = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            if (perTxn > 0) producer.initTransactions();
            int step = perTxn > 0 ? perTxn : 1000;
            while (System.nanoTime() < end) {
                if (perTxn > 0) producer.beginTransaction();
                for (int i = 0; i < step; i++) {
                    producer.send(new ProducerRecord<>(topic, null, value), (m, e) -> {
                        if (e != null) errors.incrementAndGet(); else acked.incrementAndGet();
                    });
                }
                if (perTxn > 0) {
                    producer.commitTransaction();
                    txns++;
                }
            }
            producer.flush();
        }
        double took = (System.nanoTime() - start) / 1e9;
        long bytes = acked.get() * size;
        System.out.printf("{\"bytes\": %d, \"records\": %d, \"errors\": %d, \"transactions\": %d, \"mb_per_sec\": %.1f}%n",
            bytes, acked.get(), errors.get(), txns, bytes / took / 1e6);
    }
}
