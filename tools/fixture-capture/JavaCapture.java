// Fixture capture client: Java kafka-clients 3.9.1 (the reference client).
//
// Usage: java -cp '.clients/java/jars/*' tools/fixture-capture/JavaCapture.java BOOTSTRAP SENT_FILE
// Admin CreateTopics (3 partitions), Metadata (describeTopics), one producer per codec (none,
// gzip, snappy, lz4, zstd; default config, so idempotent: InitProducerId is sent), then a group
// consumer (classic protocol) from the beginning, commitSync, close. Same records as common.py.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class JavaCapture {
    static final String CLIENT = "java-3.9.1";
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};

    record Rec(int partition, String key, String value, List<String[]> headers) {}

    static List<Rec> records(String codec) {
        return List.of(
            new Rec(1, "key-1", "value-1 " + codec + " the quick brown fox",
                    List.of(new String[]{"h", "one"}, new String[]{"h", "two"}, new String[]{"trace-id", "0af7651916cd43dd"})),
            new Rec(1, null, "value-2 " + codec + " no key", List.of()),
            new Rec(1, "key-3", null, List.<String[]>of(new String[]{"nullable", null})),
            new Rec(1, "key-4", "", List.of()),
            new Rec(1, "key-5", "value-5 " + codec + " " + "abc".repeat(8),
                    List.of(new String[]{"h", "one"}, new String[]{"empty", ""})),
            new Rec(2, "key-6", "value-6 " + codec + " other partition", List.of()));
    }

    static byte[] b(String s) { return s == null ? null : s.getBytes(StandardCharsets.UTF_8); }
    static String hex(String s) { return s == null ? "null" : "\"" + HexFormat.of().formatHex(b(s)) + "\""; }
    static String js(String s) { return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""; }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Path sentFile = Path.of(args[1]);
        String topic = "fixtures-java-3-9-1";
        Properties base = new Properties();
        base.put("bootstrap.servers", bootstrap);
        base.put("client.id", "fixture-capture-java");

        try (Admin admin = Admin.create(base)) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
                System.out.println("created " + topic);
            } catch (Exception e) {
                System.err.println("createTopics: " + e);
            }
            try {
                var d = admin.describeTopics(List.of(topic)).allTopicNames().get();
                System.out.println("metadata: " + topic + " partitions=" + d.get(topic).partitions().size());
            } catch (Exception e) {
                System.err.println("describeTopics: " + e);
            }
        }

        // codec -> partition -> records json
        Map<String, Map<Integer, List<String>>> sent = new LinkedHashMap<>();
        int total = 0;
        for (String codec : CODECS) {
            Properties p = new Properties();
            p.putAll(base);
            p.put("compression.type", codec);
            p.put("linger.ms", "200");
            p.put("acks", "all");
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                var futures = new ArrayList<java.util.concurrent.Future<?>>();
                for (Rec r : records(codec)) {
                    List<Header> hs = new ArrayList<>();
                    List<String> hj = new ArrayList<>();
                    for (String[] h : r.headers()) {
                        hs.add(new RecordHeader(h[0], b(h[1])));
                        hj.add("[" + js(h[0]) + ", " + hex(h[1]) + "]");
                    }
                    futures.add(producer.send(new ProducerRecord<>(topic, r.partition(), b(r.key()), b(r.value()), hs)));
                    sent.computeIfAbsent(codec, k -> new LinkedHashMap<>())
                        .computeIfAbsent(r.partition(), k -> new ArrayList<>())
                        .add("{\"key\": " + hex(r.key()) + ", \"value\": " + hex(r.value()) + ", \"headers\": [" + String.join(", ", hj) + "]}");
                    total++;
                }
                producer.flush();
                String err = "none";
                for (var f : futures) {
                    try { f.get(); } catch (Exception e) { err = e.toString(); }
                }
                System.out.println("produced codec=" + codec + " error=" + err);
            }
        }

        StringBuilder j = new StringBuilder();
        j.append("{\"client\": \"").append(CLIENT).append("\", \"client_version\": \"")
         .append(org.apache.kafka.common.utils.AppInfoParser.getVersion())
         .append("\", \"topic\": \"").append(topic).append("\", \"sent\": [");
        boolean first = true;
        for (var ce : sent.entrySet()) {
            for (var pe : ce.getValue().entrySet()) {
                if (!first) j.append(",");
                first = false;
                j.append("\n {\"codec\": \"").append(ce.getKey()).append("\", \"partition\": ").append(pe.getKey())
                 .append(", \"records\": [\n  ").append(String.join(",\n  ", pe.getValue())).append("]}");
            }
        }
        j.append("\n]}\n");
        Files.writeString(sentFile, j.toString());

        Properties c = new Properties();
        c.putAll(base);
        c.put("group.id", "fixtures-java-3-9-1-group");
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("heartbeat.interval.ms", "300");
        c.put("session.timeout.ms", "10000");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        int got = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got < total && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> rs = consumer.poll(Duration.ofMillis(500));
                got += rs.count();
            }
            System.out.println("consumed " + got + "/" + total);
            if (got > 0) consumer.commitSync();
            long end = System.currentTimeMillis() + 1000;
            while (System.currentTimeMillis() < end) consumer.poll(Duration.ofMillis(200));
        }
        System.exit(got == total ? 0 : 1);
    }
}
