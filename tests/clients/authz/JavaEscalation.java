// An ordinary user trying to escalate with the Java AdminClient: Apache kafka-clients 3.9.1.
//
// Env (set by apps/gateway/tests/authz_clients.rs): BOOTSTRAP (a SASL_PLAINTEXT listener,
// PLAIN), TOPIC_PREFIX, ADMIN_USER/ADMIN_PASSWORD (a super user), ALICE_USER/ALICE_PASSWORD,
// BOB_USER/BOB_PASSWORD, ALLOW_EVERYONE (`true` when the harness set
// IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=true, `false` for the default).
//
// The admin binds bob ALL on his topic and denies alice READ on it. Then alice, whom nothing
// grants anything on the cluster, gets ClusterAuthorizationException from createAcls (READ on
// bob's topic for herself), deleteAcls (the DENY), alterClientQuotas (throttling everyone),
// alterUserScramCredentials (a credential for the admin) and incrementalAlterConfigs on the
// broker; the bindings are unchanged afterwards. With the default she is also refused a
// produce to a topic no binding names (TopicAuthorizationException); with allow-everyone on,
// that produce succeeds.
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaEscalation {
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
    static final boolean OPEN = "true".equals(System.getenv("ALLOW_EVERYONE"));
    static final String PREFIX = System.getenv().getOrDefault("TOPIC_PREFIX", "esc-" + ProcessHandle.current().pid());
    static final String ALICE = "User:" + need("ALICE_USER");
    static final String BOB = "User:" + need("BOB_USER");
    static final String BOBS = "b." + PREFIX + "-jprivate";
    static final String LOOSE = "c." + PREFIX + "-junbound";

    static AclBinding binding(String principal, AclOperation op, AclPermissionType permission) {
        return new AclBinding(new ResourcePattern(ResourceType.TOPIC, BOBS, PatternType.LITERAL),
            new AccessControlEntry(principal, "*", op, permission));
    }

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

    static TreeSet<String> bindings(Admin admin) throws Exception {
        AclBindingFilter any = new AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter.ANY);
        Collection<AclBinding> got = admin.describeAcls(any).values().get(TIMEOUT_S, TimeUnit.SECONDS);
        TreeSet<String> out = new TreeSet<>();
        for (AclBinding b : got) out.add(b.toString());
        return out;
    }

    static void clusterRefused(String label, KafkaFuture<?> future) throws Exception {
        try {
            future.get(TIMEOUT_S, TimeUnit.SECONDS);
            fail(label + ": succeeded, expected ClusterAuthorizationException");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof ClusterAuthorizationException,
                label + ": " + e.getCause() + ", expected ClusterAuthorizationException");
        }
    }

    static Throwable produce(Properties conf, String topic) {
        Properties p = (Properties) conf.clone();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("acks", "all");
        p.put("max.block.ms", "15000");
        p.put("enable.idempotence", "false");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>(topic, 0, "k", "v")).get(TIMEOUT_S, TimeUnit.SECONDS);
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (Exception e) {
            return e;
        }
    }

    public static void main(String[] args) throws Exception {
        Properties adminConf = sasl(need("ADMIN_USER"), need("ADMIN_PASSWORD"));
        Properties aliceConf = sasl(need("ALICE_USER"), need("ALICE_PASSWORD"));
        AclBinding bobAll = binding(BOB, AclOperation.ALL, AclPermissionType.ALLOW);
        AclBinding aliceDenied = binding(ALICE, AclOperation.READ, AclPermissionType.DENY);
        AclBinding aliceGrant = binding(ALICE, AclOperation.READ, AclPermissionType.ALLOW);
        try (Admin admin = Admin.create(adminConf); Admin alice = Admin.create(aliceConf)) {
            admin.createTopics(List.of(new NewTopic(BOBS, 1, (short) 1), new NewTopic(LOOSE, 1, (short) 1)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            admin.createAcls(List.of(bobAll, aliceDenied)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            TreeSet<String> before = bindings(admin);

            clusterRefused("alice's createAcls (READ on bob's topic for herself)", alice.createAcls(List.of(aliceGrant)).all());
            AclBindingFilter denyFilter = aliceDenied.toFilter();
            clusterRefused("alice's deleteAcls (the DENY on her)", alice.deleteAcls(List.of(denyFilter)).all());
            TreeSet<String> after = bindings(admin);
            check(after.equals(before), "the bindings changed under alice: " + after + ", expected " + before);
            step("alice's createAcls and deleteAcls refused; the bindings are unchanged");

            ClientQuotaAlteration throttle = new ClientQuotaAlteration(
                new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "")),
                List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1.0)));
            clusterRefused("alice's alterClientQuotas (every user to 1 B/s)", alice.alterClientQuotas(List.of(throttle)).all());
            UserScramCredentialUpsertion upsert = new UserScramCredentialUpsertion(need("ADMIN_USER"),
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "chosen-by-alice");
            clusterRefused("alice's alterUserScramCredentials (for the admin)", alice.alterUserScramCredentials(List.of(upsert)).all());
            String nodeId = Integer.toString(alice.describeCluster().nodes().get(TIMEOUT_S, TimeUnit.SECONDS).iterator().next().id());
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, nodeId);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("log.retention.ms", "1000"), AlterConfigOp.OpType.SET);
            clusterRefused("alice's incrementalAlterConfigs on the broker",
                alice.incrementalAlterConfigs(Map.of(broker, List.of(op))).all());
            step("alice's alterClientQuotas, alterUserScramCredentials and broker incrementalAlterConfigs refused");

            Throwable e = produce(aliceConf, LOOSE);
            if (OPEN) {
                check(e == null, "alice's produce to a topic no binding names, allow-everyone on: " + e);
                step("allow-everyone on: the unbound topic is open to alice, the cluster's management is not");
            } else {
                check(e instanceof TopicAuthorizationException,
                    "alice's produce to a topic no binding names: " + e + ", expected TopicAuthorizationException");
                step("default settings: a topic no binding names is closed to alice");
            }
        }
        System.out.println("OK java escalation attempts" + (OPEN ? " (allow-everyone on)" : ""));
        System.exit(0);
    }
}
