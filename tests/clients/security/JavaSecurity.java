// Security suite: Apache kafka-clients 3.9.1 (Java 17).
//
// Env (set by apps/gateway/tests/support/security.rs): BOOTSTRAP (a SASL_SSL listener),
// SSL_BOOTSTRAP (an SSL listener that requires a client certificate), TOPIC_PREFIX, CA_FILE,
// CLIENT_KEYSTORE_FILE (PEM: the client's PKCS#8 key and certificate, CN=alice),
// ADMIN_USER/ADMIN_PASSWORD (PLAIN super user), PLAIN_USER/PLAIN_PASSWORD,
// SCRAM_USER/SCRAM_PASSWORD, OAUTH_TOKEN_ENDPOINT (a loopback OAuth token endpoint that
// answers client-credentials requests with a signed JWT). Optional pieces are skipped when
// their variable is missing (SSL_BOOTSTRAP, OAUTH_TOKEN_ENDPOINT).
//
// The admin creates one topic per mechanism (3 partitions) and SCRAM_USER's credentials with
// Admin.alterUserScramCredentials, then finds them with describeUserScramCredentials; a
// non-super user is refused there (ClusterAuthorizationException). Round trips (producer,
// group consumer that commits, committed offsets read back): PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512, OAUTHBEARER through sasl.oauthbearer.token.endpoint.url (allowed with the
// system property org.apache.kafka.sasl.oauthbearer.allowed.urls), and SSL with a PEM
// keystore. A wrong password must end in SaslAuthenticationException, not a hang.
import java.time.Duration;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaSecurity {
    static final int PARTITIONS = 3;
    static final int RECORDS = 6;
    static final long TIMEOUT_S = 30;

    static void fail(String msg) {
        System.err.println("FAIL: " + msg);
        System.err.flush();
        System.exit(1);
    }

    static void check(boolean cond, String msg) {
        if (!cond) fail(msg);
    }

    static void step(String msg) {
        System.out.println("[" + LocalTime.now().format(DateTimeFormatter.ofPattern("HH:mm:ss")) + "] " + msg);
        System.out.flush();
    }

    static String need(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) fail(name + " is not set (the harness in apps/gateway/tests/support/security.rs sets it)");
        return v;
    }

    static String jaasQuote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static final String BOOTSTRAP = need("BOOTSTRAP");
    static final String PREFIX = System.getenv().getOrDefault("TOPIC_PREFIX", "security-" + ProcessHandle.current().pid());
    static final String CA_FILE = need("CA_FILE");

    static Properties tls(String bootstrap, String protocol) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", protocol);
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", CA_FILE);
        p.put("request.timeout.ms", "30000");
        p.put("default.api.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "2000");
        return p;
    }

    static Properties sasl(String mechanism, String user, String password) {
        Properties p = tls(BOOTSTRAP, "SASL_SSL");
        String module = mechanism.equals("PLAIN")
            ? "org.apache.kafka.common.security.plain.PlainLoginModule"
            : "org.apache.kafka.common.security.scram.ScramLoginModule";
        p.put("sasl.mechanism", mechanism);
        p.put("sasl.jaas.config", module + " required username=" + jaasQuote(user) + " password=" + jaasQuote(password) + ";");
        return p;
    }

    static Properties oauth(String endpoint) {
        Properties p = tls(BOOTSTRAP, "SASL_SSL");
        p.put("sasl.mechanism", "OAUTHBEARER");
        p.put("sasl.oauthbearer.token.endpoint.url", endpoint);
        p.put("sasl.login.callback.handler.class", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
            + " clientId=\"kafka-java-client\" clientSecret=\"kafka-java-client-secret\" scope=\"kafka\";");
        return p;
    }

    static Properties clientCert(String bootstrap, String keystore) {
        Properties p = tls(bootstrap, "SSL");
        p.put("ssl.keystore.type", "PEM");
        p.put("ssl.keystore.location", keystore);
        return p;
    }

    static String topic(String label) {
        return PREFIX + "-java-" + label;
    }

    static void roundTrip(String label, Properties conf) throws Exception {
        String topic = topic(label);
        Map<Integer, List<String>> want = new TreeMap<>();
        Properties pp = new Properties();
        pp.putAll(conf);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("acks", "all");
        pp.put("linger.ms", "5");
        pp.put("max.block.ms", "30000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS; i++) {
                int part = i % PARTITIONS;
                String key = label + "-key-" + i, value = label + "-value-" + i;
                want.computeIfAbsent(part, k -> new ArrayList<>()).add(key + "|" + value);
                producer.send(new ProducerRecord<>(topic, part, key, value)).get(TIMEOUT_S, TimeUnit.SECONDS);
            }
        }
        String group = PREFIX + "-java-" + label + "-group";
        Properties cp = new Properties();
        cp.putAll(conf);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("group.id", group);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        Map<Integer, List<String>> got = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            int n = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
            while (n < RECORDS && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.key() + "|" + r.value());
                    n++;
                }
            }
            check(got.equals(want), label + ": consumed " + got + ", expected " + want);
            consumer.commitSync(Duration.ofSeconds(TIMEOUT_S));
            Set<TopicPartition> parts = new java.util.HashSet<>();
            for (int p = 0; p < PARTITIONS; p++) parts.add(new TopicPartition(topic, p));
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(parts, Duration.ofSeconds(TIMEOUT_S));
            for (int p = 0; p < PARTITIONS; p++) {
                OffsetAndMetadata om = committed.get(new TopicPartition(topic, p));
                long expect = want.getOrDefault(p, List.of()).size();
                check(om != null && om.offset() == expect, label + ": committed offset of partition " + p + " is " + om + ", expected " + expect);
            }
        }
        step(label + ": " + RECORDS + " records produced and consumed by group " + group);
    }

    static void refused(String label, Properties conf) throws Exception {
        long started = System.nanoTime();
        try (Admin admin = Admin.create(conf)) {
            admin.describeCluster().clusterId().get(TIMEOUT_S, TimeUnit.SECONDS);
            fail(label + ": DescribeCluster answered without valid credentials");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof SaslAuthenticationException,
                label + ": expected SaslAuthenticationException, got " + e.getCause());
        }
        step(label + ": refused after " + (System.nanoTime() - started) / 1_000_000 + " ms");
    }

    public static void main(String[] args) throws Exception {
        String adminUser = need("ADMIN_USER"), adminPassword = need("ADMIN_PASSWORD");
        String plainUser = need("PLAIN_USER"), plainPassword = need("PLAIN_PASSWORD");
        // MECHANISMS: which round trips run (default all), e.g. "plain" against a gateway
        // whose PLAIN goes to Iggy
        String only = System.getenv("MECHANISMS");
        Set<String> chosen = only == null || only.isEmpty() ? null : Set.of(only.toLowerCase().split("\\s*,\\s*"));
        boolean scram = chosen == null || chosen.contains("scram-sha-256");
        String scramUser = scram ? need("SCRAM_USER") : null, scramPassword = scram ? need("SCRAM_PASSWORD") : null;
        String endpoint = chosen == null || chosen.contains("oauthbearer") ? System.getenv("OAUTH_TOKEN_ENDPOINT") : null;
        String sslBootstrap = chosen == null || chosen.contains("ssl-client-cert") ? System.getenv("SSL_BOOTSTRAP") : null;
        String keystore = System.getenv("CLIENT_KEYSTORE_FILE");
        if (endpoint != null) {
            // kafka-clients 3.9.1 checks token endpoint URLs against this list (CVE-2025-27817)
            System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls", endpoint);
        }
        List<String> labels = new ArrayList<>(List.of("plain"));
        if (scram) labels.addAll(List.of("scram-sha-256", "scram-sha-512"));
        if (endpoint != null) labels.add("oauthbearer");
        if (sslBootstrap != null && keystore != null) labels.add("ssl-client-cert");

        try (Admin admin = Admin.create(sasl("PLAIN", adminUser, adminPassword))) {
            List<NewTopic> topics = new ArrayList<>();
            for (String l : labels) topics.add(new NewTopic(topic(l), PARTITIONS, (short) 1));
            admin.createTopics(topics).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            step("topics created as " + adminUser);
            if (scram) createScram(admin, scramUser, scramPassword);
        }
        if (scram) {
            try (Admin admin = Admin.create(sasl("PLAIN", plainUser, plainPassword))) {
                admin.describeUserScramCredentials(List.of(scramUser)).description(scramUser).get(TIMEOUT_S, TimeUnit.SECONDS);
                fail("describeUserScramCredentials as " + plainUser + " (not a super user) succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof ClusterAuthorizationException,
                    "describeUserScramCredentials as " + plainUser + ": expected ClusterAuthorizationException, got " + e.getCause());
                step("describeUserScramCredentials refused for " + plainUser);
            }
        }

        roundTrip("plain", sasl("PLAIN", plainUser, plainPassword));
        if (scram) {
            roundTrip("scram-sha-256", sasl("SCRAM-SHA-256", scramUser, scramPassword));
            roundTrip("scram-sha-512", sasl("SCRAM-SHA-512", scramUser, scramPassword));
        }
        if (endpoint != null) roundTrip("oauthbearer", oauth(endpoint));
        if (labels.contains("ssl-client-cert")) roundTrip("ssl-client-cert", clientCert(sslBootstrap, keystore));
        // last: each rejection delays the next authentication from this address
        refused("wrong PLAIN password", sasl("PLAIN", plainUser, "not-" + plainPassword));
        System.out.println("OK java security");
        System.exit(0);
    }

    static void createScram(Admin admin, String scramUser, String scramPassword) throws Exception {
        // One request per mechanism: a KRaft controller refuses two changes of one user in one
        // request (DUPLICATE_RESOURCE), whatever the mechanisms
        for (ScramCredentialInfo info : List.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192))) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(scramUser, info, scramPassword)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
        }
        UserScramCredentialsDescription d = admin.describeUserScramCredentials(List.of(scramUser))
            .description(scramUser).get(TIMEOUT_S, TimeUnit.SECONDS);
        Map<String, Integer> infos = new TreeMap<>();
        for (ScramCredentialInfo i : d.credentialInfos()) infos.put(i.mechanism().mechanismName(), i.iterations());
        check(infos.equals(Map.of("SCRAM-SHA-256", 4096, "SCRAM-SHA-512", 8192)),
            "describeUserScramCredentials(" + scramUser + ") gave " + infos);
        step("SCRAM credentials of " + scramUser + " created and described");
    }
}
