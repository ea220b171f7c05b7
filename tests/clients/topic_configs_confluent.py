#!/usr/bin/env python3
"""Topic configuration through confluent-kafka's admin API (librdkafka).

Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX (unique per run),
EXPECT_STATIC_RETENTION_MS (the gateway's default retention.ms, set by the test through
IGGY_KAFKA_DEFAULT_RETENTION_MS, so retention.ms shows as the broker's own setting).

CreateTopics with the settings librdkafka's own admin tests and compacted-topic users
pass; DescribeConfigs shows them as DYNAMIC_TOPIC_CONFIG, retention.ms as
STATIC_BROKER_CONFIG and everything else as DEFAULT_CONFIG, with synonyms; the broker
resource shows the broker names; IncrementalAlterConfigs APPEND/SUBTRACT on cleanup.policy,
validate_only, DELETE, and the refusals (APPEND on a non-list, unknown and removed names,
values out of range).
"""
import os

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, NewTopic, ResourceType)

from common import check, env, fail, finish, step

bootstrap, prefix = env()
static_retention = os.environ.get("EXPECT_STATIC_RETENTION_MS", "3600000")
admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "topic-configs"})
topic = f"{prefix}-configs"

created_with = {
    "compression.type": "lz4",
    "delete.retention.ms": "900",
    "cleanup.policy": "compact",
    "min.compaction.lag.ms": "0",
    "segment.bytes": "1048576",
    "min.insync.replicas": "1",
    "message.timestamp.type": "CreateTime",
}


def create(name, config):
    """None on success, else the KafkaError."""
    fut = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                        config=config)])[name]
    try:
        fut.result(20)
        return None
    except KafkaException as e:
        return e.args[0]


def describe(kind, name):
    res = ConfigResource(kind, name)
    return admin.describe_configs([res], request_timeout=20)[res].result(20)


def alter(ops, validate_only=False):
    """None on success, else the KafkaError."""
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops])
    try:
        admin.incremental_alter_configs([res], request_timeout=20,
                                        validate_only=validate_only)[res].result(20)
        return None
    except KafkaException as e:
        return e.args[0]


err = create(topic, created_with)
check(err is None, f"CreateTopics with {created_with}: {err}")
step(f"created {topic} with {created_with}")

configs = describe(ResourceType.TOPIC, topic)
check(len(configs) >= 30, f"DescribeConfigs lists every topic setting, got {len(configs)}")
for name, entry in configs.items():
    if name in created_with:
        want = ConfigSource.DYNAMIC_TOPIC_CONFIG
    elif name == "retention.ms":
        want = ConfigSource.STATIC_BROKER_CONFIG
    else:
        want = ConfigSource.DEFAULT_CONFIG
    check(entry.source == want.value, f"{name}: source {entry.source}, want {want}")
    check(not entry.is_read_only, f"{name} is read-only")
    check(not entry.is_sensitive, f"{name} is sensitive")
for name, value in created_with.items():
    check(configs[name].value == value, f"{name}={configs[name].value}, want {value}")
check(configs["retention.ms"].value == static_retention,
      f"retention.ms={configs['retention.ms'].value}, want {static_retention}")
check(configs["max.message.bytes"].value == "1048588",
      f"max.message.bytes={configs['max.message.bytes'].value}")
syn = configs["delete.retention.ms"].synonyms
check("log.cleaner.delete.retention.ms" in syn,
      f"delete.retention.ms synonyms {list(syn)} lack log.cleaner.delete.retention.ms")
check(configs["retention.ms"].synonyms.get("log.retention.ms") is not None,
      f"retention.ms synonyms {list(configs['retention.ms'].synonyms)}")
step(f"DescribeConfigs: {len(configs)} settings, sources and synonyms as Kafka reports them")

broker_id = next(iter(admin.list_topics(timeout=10).brokers))
broker = describe(ResourceType.BROKER, str(broker_id))
for name in ["log.retention.ms", "log.cleanup.policy", "message.max.bytes", "num.partitions",
             "log.cleaner.delete.retention.ms", "default.replication.factor"]:
    check(name in broker, f"broker resource lacks {name}")
check(broker["log.retention.ms"].value == static_retention,
      f"broker log.retention.ms={broker['log.retention.ms'].value}")
step(f"broker resource: {len(broker)} settings")

# --- IncrementalAlterConfigs --------------------------------------------------------
A, S, SET, DEL = (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT,
                  AlterConfigOpType.SET, AlterConfigOpType.DELETE)


def value(name):
    return describe(ResourceType.TOPIC, topic)[name]


err = alter([("cleanup.policy", A, "delete")], validate_only=True)
check(err is None, f"validate_only APPEND: {err}")
check(value("cleanup.policy").value == "compact", "validate_only changed cleanup.policy")
err = alter([("cleanup.policy", A, "delete"), ("compression.type", SET, "zstd")])
check(err is None, f"APPEND delete: {err}")
v = value("cleanup.policy").value
check(set(v.split(",")) == {"compact", "delete"}, f"after APPEND: cleanup.policy={v}")
err = alter([("cleanup.policy", S, "compact")])
check(err is None, f"SUBTRACT compact: {err}")
check(value("cleanup.policy").value == "delete", "after SUBTRACT")
err = alter([("compression.type", DEL, None)])
check(err is None, f"DELETE compression.type: {err}")
e = value("compression.type")
check((e.value, e.source) == ("producer", ConfigSource.DEFAULT_CONFIG.value),
      f"after DELETE: {e.value} {e.source}")
step("IncrementalAlterConfigs SET, APPEND, SUBTRACT, DELETE, validate_only")

for ops, why in [
    ([("compression.type", A, "gzip")], "APPEND on a string"),
    ([("retention.ms", S, "1")], "SUBTRACT on a long"),
    ([("no.such.config", SET, "1")], "unknown name"),
    ([("message.format.version", SET, "3.0")], "removed in Kafka 4"),
    ([("segment.bytes", SET, "1000")], "below the minimum"),
    ([("cleanup.policy", SET, "shred")], "not a policy"),
]:
    err = alter(ops)
    check(err is not None and err.code() == KafkaError.INVALID_CONFIG,
          f"{why}: {ops} gave {err}, want INVALID_CONFIG")
err = create(f"{topic}-bad", {"message.format.version": "3.0"})
check(err is not None and err.code() == KafkaError.INVALID_CONFIG,
      f"CreateTopics with message.format.version: {err}")
step("refusals are INVALID_CONFIG")

admin.delete_topics([topic])[topic].result(20)
finish("topic configs (confluent-kafka)")
