// ACL management with the Java AdminClient: Apache kafka-clients 3.9.1 (Java 17).
//
// Env (set by apps/gateway/tests/authz_clients.rs): BOOTSTRAP (a SASL_PLAINTEXT listener,
// PLAIN), TOPIC_PREFIX, ADMIN_USER/ADMIN_PASSWORD (a super user), ALICE_USER/ALICE_PASSWORD,
// BOB_USER/BOB_PASSWORD. The gateway has allow-everyone-if-no-ACL-found off.
//
// alice's produce is refused (TopicAuthorizationException) and her createAcls too
// (ClusterAuthorizationException). The admin creates, with Admin.createAcls: alice WRITE and
// READ on PREFIXED `jacl.` topics, READ on her group, DENY READ on one literal topic, bob
// DESCRIBE on one topic. Right after: alice produces (idempotent, the Java default: her
// prefixed WRITE is what InitProducerId needs), consumes in her group and is refused the
// denied topic. describeAcls with filters (principal, PREFIXED, MATCH, LITERAL + DENY,
// GROUP, operation, unknown principal) returns exactly what each selects. deleteAcls with a
// filter removes the WRITE binding (returned as deleted): alice's next produce is refused,
// her consume still works; deleting the rest ends her consume; an ANY filter removes bob's.
import java.time.Duration;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeleteAclsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaAcls {
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
        if (v == null || v.isEmpty()) fail(name + " is not set (the harness in apps/gateway/tests/authz_clients.rs sets it)");
        return v;
    }

    static String jaasQuote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static final String BOOTSTRAP = need("BOOTSTRAP");
    static final String PREFIX = System.getenv().getOrDefault("TOPIC_PREFIX", "acls-" + ProcessHandle.current().pid());
    static final String ALICE = "User:" + need("ALICE_USER");
    static final String BOB = "User:" + need("BOB_USER");
    static final String TOPIC = "jacl." + PREFIX + "-t";
    static final String SECRET = "jacl." + PREFIX + "-secret";
    static final String GROUP = PREFIX + "-java-alice-group";

    static AclBinding binding(ResourceType type, String name, PatternType pattern, String principal,
                              AclOperation op, AclPermissionType permission) {
        return new AclBinding(new ResourcePattern(type, name, pattern), new AccessControlEntry(principal, "*", op, permission));
    }

    static final AclBinding B_WRITE = binding(ResourceType.TOPIC, "jacl.", PatternType.PREFIXED, ALICE, AclOperation.WRITE, AclPermissionType.ALLOW);
    static final AclBinding B_READ = binding(ResourceType.TOPIC, "jacl.", PatternType.PREFIXED, ALICE, AclOperation.READ, AclPermissionType.ALLOW);
    static final AclBinding B_GROUP = binding(ResourceType.GROUP, GROUP, PatternType.LITERAL, ALICE, AclOperation.READ, AclPermissionType.ALLOW);
    static final AclBinding B_DENY = binding(ResourceType.TOPIC, SECRET, PatternType.LITERAL, ALICE, AclOperation.READ, AclPermissionType.DENY);
    static final AclBinding B_BOB = binding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, BOB, AclOperation.DESCRIBE, AclPermissionType.ALLOW);

    static Properties sasl(String user, String password) {
        Properties p = new Properties();
        p.put("bootstrap.servers", BOOTSTRAP);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "PLAIN");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username="
            + jaasQuote(user) + " password=" + jaasQuote(password) + ";");
        p.put("request.timeout.ms", "30000");
        p.put("default.api.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "2000");
        return p;
    }

    static Properties alice() {
        return sasl(need("ALICE_USER"), need("ALICE_PASSWORD"));
    }

    static AclBindingFilter filter(ResourceType type, String name, PatternType pattern, String principal,
                                   AclOperation op, AclPermissionType permission) {
        return new AclBindingFilter(new ResourcePatternFilter(type, name, pattern),
            new AccessControlEntryFilter(principal, null, op, permission));
    }

    static AclBindingFilter any() {
        return filter(ResourceType.ANY, null, PatternType.ANY, null, AclOperation.ANY, AclPermissionType.ANY);
    }

    static TreeSet<String> names(Collection<AclBinding> bindings) {
        TreeSet<String> out = new TreeSet<>();
        for (AclBinding b : bindings) out.add(b.toString());
        return out;
    }

    static void described(Admin admin, String label, AclBindingFilter f, List<AclBinding> want) throws Exception {
        Collection<AclBinding> got = admin.describeAcls(f).values().get(TIMEOUT_S, TimeUnit.SECONDS);
        check(names(got).equals(names(want)), "describeAcls " + label + ": " + names(got) + ", expected " + names(want));
    }

    static void deleted(Admin admin, String label, AclBindingFilter f, List<AclBinding> want) throws Exception {
        DeleteAclsResult.FilterResults results = admin.deleteAcls(List.of(f)).values().get(f).get(TIMEOUT_S, TimeUnit.SECONDS);
        List<AclBinding> got = new ArrayList<>();
        for (DeleteAclsResult.FilterResult r : results.values()) {
            check(r.exception() == null, "deleteAcls " + label + ": " + r.exception());
            got.add(r.binding());
        }
        check(names(got).equals(names(want)), "deleteAcls " + label + " deleted " + names(got) + ", expected " + names(want));
    }

    /** alice produces one record; null when it was written, else the error. */
    static Throwable produce(String topic, boolean idempotent) {
        Properties p = alice();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("acks", "all");
        p.put("max.block.ms", "15000");
        p.put("enable.idempotence", Boolean.toString(idempotent));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>(topic, 0, "k", "v")).get(TIMEOUT_S, TimeUnit.SECONDS);
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (Exception e) {
            return e;
        }
    }

    static void produceRefused(String topic) {
        Throwable e = produce(topic, false);
        check(e instanceof TopicAuthorizationException, "alice's produce to " + topic + ": " + e + ", expected TopicAuthorizationException");
    }

    /** alice reads up to `count` records of `topic` in GROUP; the records or the error. */
    static Object consume(String topic, int count) {
        Properties p = alice();
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("group.id", GROUP);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
            while (got.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) got.add(r.key());
            }
        } catch (TopicAuthorizationException | GroupAuthorizationException e) {
            return e;
        }
        return got;
    }

    public static void main(String[] args) throws Exception {
        Properties adminConf = sasl(need("ADMIN_USER"), need("ADMIN_PASSWORD"));
        try (Admin admin = Admin.create(adminConf); Admin aliceAdmin = Admin.create(alice())) {
            admin.createTopics(List.of(new NewTopic(TOPIC, PARTITIONS, (short) 1), new NewTopic(SECRET, PARTITIONS, (short) 1)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            described(admin, "everything, before", any(), List.of());
            produceRefused(TOPIC);
            try {
                aliceAdmin.createAcls(List.of(B_WRITE)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
                fail("alice's createAcls succeeded");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof ClusterAuthorizationException, "alice's createAcls: " + e.getCause());
            }
            step("before the grant: alice's produce refused, her createAcls refused");

            List<AclBinding> all = List.of(B_WRITE, B_READ, B_GROUP, B_DENY, B_BOB);
            admin.createAcls(all).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            Throwable e = produce(TOPIC, true);
            check(e == null, "alice's idempotent produce to " + TOPIC + " after the grant: " + e);
            e = produce(SECRET, true);
            check(e == null, "alice's idempotent produce to " + SECRET + " after the grant: " + e);
            Object got = consume(TOPIC, 1);
            check(got instanceof List && ((List<?>) got).size() == 1, "alice's consume of " + TOPIC + ": " + got);
            got = consume(SECRET, 1);
            check(got instanceof TopicAuthorizationException, "alice's consume of the denied " + SECRET + ": " + got);
            step("right after createAcls: alice produces (idempotent) to both topics, consumes one, the DENY READ holds");

            described(admin, "everything", any(), all);
            described(admin, "principal alice", filter(ResourceType.ANY, null, PatternType.ANY, ALICE, AclOperation.ANY, AclPermissionType.ANY),
                List.of(B_WRITE, B_READ, B_GROUP, B_DENY));
            described(admin, "PREFIXED topics", filter(ResourceType.TOPIC, null, PatternType.PREFIXED, null, AclOperation.ANY, AclPermissionType.ANY),
                List.of(B_WRITE, B_READ));
            described(admin, "MATCH " + TOPIC, filter(ResourceType.TOPIC, TOPIC, PatternType.MATCH, null, AclOperation.ANY, AclPermissionType.ANY),
                List.of(B_WRITE, B_READ, B_BOB));
            described(admin, "LITERAL secret DENY", filter(ResourceType.TOPIC, SECRET, PatternType.LITERAL, null, AclOperation.ANY, AclPermissionType.DENY),
                List.of(B_DENY));
            described(admin, "groups", filter(ResourceType.GROUP, null, PatternType.ANY, null, AclOperation.ANY, AclPermissionType.ANY),
                List.of(B_GROUP));
            described(admin, "operation WRITE", filter(ResourceType.ANY, null, PatternType.ANY, null, AclOperation.WRITE, AclPermissionType.ANY),
                List.of(B_WRITE));
            described(admin, "unknown principal", filter(ResourceType.ANY, null, PatternType.ANY, "User:nobody", AclOperation.ANY, AclPermissionType.ANY),
                List.of());
            step("describeAcls with filters: principal, PREFIXED, MATCH, LITERAL+DENY, GROUP, operation, unknown");

            deleted(admin, "alice's PREFIXED WRITE", filter(ResourceType.TOPIC, "jacl.", PatternType.PREFIXED, ALICE, AclOperation.WRITE, AclPermissionType.ANY),
                List.of(B_WRITE));
            produceRefused(TOPIC);
            got = consume(TOPIC, 1);
            check(got instanceof List && ((List<?>) got).size() == 1, "alice's consume after the WRITE delete: " + got);
            step("after deleteAcls (WRITE): alice's next produce refused, her consume still works");
            deleted(admin, "the rest of alice's", filter(ResourceType.ANY, null, PatternType.ANY, ALICE, AclOperation.ANY, AclPermissionType.ANY),
                List.of(B_READ, B_GROUP, B_DENY));
            got = consume(TOPIC, 1);
            check(got instanceof TopicAuthorizationException || got instanceof GroupAuthorizationException,
                "alice's consume after deleting her bindings: " + got);
            deleted(admin, "everything", any(), List.of(B_BOB));
            described(admin, "everything, at the end", any(), List.of());
            step("after deleteAcls (the rest): alice's consume refused; no binding left");
        }
        System.out.println("OK java ACL management");
        System.exit(0);
    }
}
