// Client quotas with Apache kafka-clients 3.9.1 (Java 17): the Admin client's
// alterClientQuotas / describeClientQuotas and a producer throttled by the gateway.
//
// Run: BOOTSTRAP=host:port TOPIC_PREFIX=... java -cp '.clients/java/jars/*' tests/clients/JavaQuotas.java
// against a gateway with a short quota window (IGGY_KAFKA_QUOTA_WINDOW_SIZE_MS=100).
// Sets a producer_byte_rate for one client id and a default-entity consumer_byte_rate,
// lists them with exact, default and specified filters, checks that validateOnly changes
// nothing and that an unknown key is refused (InvalidRequestException), produces 300 kB
// with that client id and expects the producer's produce-throttle-time-max metric above 0
// (the client read throttle_time_ms), then removes the quotas and finds none left.
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class JavaQuotas {
    static final String CLIENT = "java-quota-producer";

    static void fail(String msg) {
        System.err.println("FAIL: " + msg);
        System.err.flush();
        System.exit(1);
    }

    static Map<ClientQuotaEntity, Map<String, Double>> describe(Admin admin, ClientQuotaFilter f)
            throws Exception {
        return admin.describeClientQuotas(f).entities().get();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = System.getenv("BOOTSTRAP");
        String topic = System.getenv("TOPIC_PREFIX") + "-java-quotas";
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            ClientQuotaEntity client =
                    new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, CLIENT));
            ClientQuotaEntity defaults = new ClientQuotaEntity(
                    Collections.singletonMap(ClientQuotaEntity.CLIENT_ID, null));

            admin.alterClientQuotas(
                    List.of(new ClientQuotaAlteration(client,
                            List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1.0)))),
                    new AlterClientQuotasOptions().validateOnly(true)).all().get();
            if (!describe(admin, ClientQuotaFilter.all()).isEmpty()) {
                fail("validateOnly changed the quotas");
            }

            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(client,
                            List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 20000.0))),
                    new ClientQuotaAlteration(defaults,
                            List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", 1e9)))))
                    .all().get();

            var exact = describe(admin, ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.CLIENT_ID, CLIENT))));
            if (!exact.equals(Map.of(client, Map.of("producer_byte_rate", 20000.0)))) {
                fail("exact filter: " + exact);
            }
            var dflt = describe(admin, ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID))));
            if (!dflt.equals(Map.of(defaults, Map.of("consumer_byte_rate", 1e9)))) {
                fail("default filter: " + dflt);
            }
            var specified = describe(admin, ClientQuotaFilter.contains(List.of(
                    ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.CLIENT_ID))));
            if (!specified.keySet().equals(java.util.Set.of(client))) {
                fail("specified filter: " + specified);
            }

            try {
                admin.alterClientQuotas(List.of(new ClientQuotaAlteration(client,
                        List.of(new ClientQuotaAlteration.Op("bogus_rate", 1.0))))).all().get();
                fail("an unknown quota key was accepted");
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof InvalidRequestException)) {
                    fail("unknown key: " + e.getCause());
                }
            }

            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            pp.put("client.id", CLIENT);
            pp.put("key.serializer", ByteArraySerializer.class.getName());
            pp.put("value.serializer", ByteArraySerializer.class.getName());
            pp.put("linger.ms", "0");
            double throttle = 0;
            long start = System.nanoTime();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < 30; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, null, new byte[10_000])).get();
                }
                for (Map.Entry<MetricName, ? extends Metric> m : producer.metrics().entrySet()) {
                    if (m.getKey().name().equals("produce-throttle-time-max")
                            && m.getKey().group().equals("producer-metrics")) {
                        throttle = (Double) m.getValue().metricValue();
                    }
                }
            }
            double took = (System.nanoTime() - start) / 1e9;
            System.out.printf("produced 300 kB at a 20 kB/s quota in %.2f s, max throttle %.0f ms%n",
                    took, throttle);
            if (!(throttle > 0)) {
                fail("the producer never saw a throttle time");
            }

            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(client,
                            List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))),
                    new ClientQuotaAlteration(defaults,
                            List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", null)))))
                    .all().get();
            var left = describe(admin, ClientQuotaFilter.all());
            if (!left.isEmpty()) {
                fail("quotas left after removal: " + left);
            }
            admin.deleteTopics(List.of(topic)).all().get();
        }
        System.out.println("OK");
    }
}
