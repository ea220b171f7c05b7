// Topic configuration through the Java AdminClient (kafka-clients, the reference client).
//
// Run: BOOTSTRAP=host:port TOPIC_PREFIX=... EXPECT_STATIC_RETENTION_MS=3600000 \
//      java -cp '.clients/java/jars/*' tests/clients/JavaTopicConfigs.java
// CreateTopics with configs (the answer's own config listing, v5+); describeConfigs with
// includeSynonyms and includeDocumentation: source, type and documentation of every setting,
// synonyms in Kafka's order; incrementalAlterConfigs APPEND/SUBTRACT on cleanup.policy and
// the INVALID_CONFIG refusals (APPEND on a non-list, unknown name).
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;

public class JavaTopicConfigs {
    static void check(boolean ok, String msg) {
        if (!ok) {
            System.err.println("FAIL: " + msg);
            System.exit(1);
        }
    }

    static Config describe(Admin admin, ConfigResource res) throws Exception {
        DescribeConfigsOptions opts = new DescribeConfigsOptions().includeSynonyms(true).includeDocumentation(true);
        return admin.describeConfigs(List.of(res), opts).all().get(20, TimeUnit.SECONDS).get(res);
    }

    static Throwable alter(Admin admin, ConfigResource res, Collection<AlterConfigOp> ops) throws Exception {
        try {
            admin.incrementalAlterConfigs(Map.of(res, ops)).all().get(20, TimeUnit.SECONDS);
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = System.getenv("BOOTSTRAP");
        String prefix = System.getenv().getOrDefault("TOPIC_PREFIX", "java-configs");
        String staticRetention = System.getenv().getOrDefault("EXPECT_STATIC_RETENTION_MS", "3600000");
        String topic = prefix + "-java-configs";
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            Map<String, String> given = Map.of(
                    "cleanup.policy", "compact",
                    "compression.type", "lz4",
                    "delete.retention.ms", "900",
                    "min.cleanable.dirty.ratio", "0.25",
                    "segment.jitter.ms", "5");
            CreateTopicsResult created = admin.createTopics(
                    List.of(new NewTopic(topic, 1, (short) 1).configs(given)));
            created.all().get(20, TimeUnit.SECONDS);
            Config fromCreate = created.config(topic).get(20, TimeUnit.SECONDS);
            check(fromCreate.get("compression.type").value().equals("lz4"), "CreateTopics answer: compression.type");
            check(fromCreate.get("compression.type").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "CreateTopics answer: compression.type source " + fromCreate.get("compression.type").source());
            System.out.println("created " + topic + " with " + given + "; answer lists " + fromCreate.entries().size() + " settings");

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = describe(admin, res);
            check(config.entries().size() >= 30, "every topic setting listed, got " + config.entries().size());
            for (ConfigEntry e : config.entries()) {
                ConfigEntry.ConfigSource want = given.containsKey(e.name())
                        ? ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG
                        : e.name().equals("retention.ms")
                                ? ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG
                                : ConfigEntry.ConfigSource.DEFAULT_CONFIG;
                check(e.source() == want, e.name() + ": source " + e.source() + ", want " + want);
                check(e.type() != ConfigEntry.ConfigType.UNKNOWN, e.name() + ": type unknown");
                check(e.documentation() != null && !e.documentation().isEmpty(), e.name() + ": no documentation");
                check(!e.isReadOnly() && !e.isSensitive(), e.name() + ": read-only or sensitive");
            }
            for (Map.Entry<String, String> g : given.entrySet()) {
                check(config.get(g.getKey()).value().equals(g.getValue()),
                        g.getKey() + "=" + config.get(g.getKey()).value());
            }
            check(config.get("retention.ms").value().equals(staticRetention), "retention.ms=" + config.get("retention.ms").value());
            check(config.get("cleanup.policy").type() == ConfigEntry.ConfigType.LIST, "cleanup.policy type");
            check(config.get("retention.ms").type() == ConfigEntry.ConfigType.LONG, "retention.ms type");
            check(config.get("max.message.bytes").type() == ConfigEntry.ConfigType.INT, "max.message.bytes type");
            check(config.get("min.cleanable.dirty.ratio").type() == ConfigEntry.ConfigType.DOUBLE, "ratio type");
            check(config.get("preallocate").type() == ConfigEntry.ConfigType.BOOLEAN, "preallocate type");
            check(config.get("compression.type").type() == ConfigEntry.ConfigType.STRING, "compression.type type");
            List<ConfigEntry.ConfigSynonym> syn = config.get("delete.retention.ms").synonyms();
            check(syn.size() == 2
                    && syn.get(0).name().equals("delete.retention.ms")
                    && syn.get(0).source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG
                    && syn.get(1).name().equals("log.cleaner.delete.retention.ms")
                    && syn.get(1).source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG,
                    "delete.retention.ms synonyms " + syn);
            List<ConfigEntry.ConfigSynonym> ret = config.get("retention.ms").synonyms();
            check(ret.size() == 2
                    && ret.get(0).name().equals("log.retention.ms")
                    && ret.get(0).source() == ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG
                    && ret.get(0).value().equals(staticRetention),
                    "retention.ms synonyms " + ret);
            System.out.println("describeConfigs: " + config.entries().size() + " settings with source, type, documentation, synonyms");

            Throwable err = alter(admin, res, List.of(
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.APPEND)));
            check(err == null, "APPEND delete: " + err);
            String policy = describe(admin, res).get("cleanup.policy").value();
            check(policy.equals("compact,delete") || policy.equals("delete,compact"), "after APPEND: " + policy);
            err = alter(admin, res, List.of(
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT)));
            check(err == null, "SUBTRACT delete: " + err);
            check(describe(admin, res).get("cleanup.policy").value().equals("compact"), "after SUBTRACT");
            err = alter(admin, res, List.of(
                    new AlterConfigOp(new ConfigEntry("compression.type", "gzip"), AlterConfigOp.OpType.APPEND)));
            check(err instanceof InvalidConfigurationException, "APPEND on a string: " + err);
            err = alter(admin, res, List.of(
                    new AlterConfigOp(new ConfigEntry("message.format.version", "3.0"), AlterConfigOp.OpType.SET)));
            check(err instanceof InvalidConfigurationException, "removed name: " + err);
            System.out.println("incrementalAlterConfigs APPEND/SUBTRACT and refusals");

            admin.deleteTopics(List.of(topic)).all().get(20, TimeUnit.SECONDS);
        }
        System.out.println("OK topic configs (java)");
    }
}
