"""CREATE through Iggy permissions is judged on the stream the topic lands in (confluent-kafka).

The harness (apps/gateway/tests/authz_iggy.rs) gives the Iggy user `USER_NAME` the right to
manage topics in the default stream only, and a topic map that routes `ROUTED_TOPIC` into
another stream. No ACL binding names either topic. The user's AdminClient:
- creates `OWN_TOPIC` (default stream): allowed by its Iggy permissions;
- creates `ROUTED_TOPIC`: TOPIC_AUTHORIZATION_FAILED, since it would land in a stream the
  user may not manage (the gateway would otherwise create it with its own Iggy account).
Env: BOOTSTRAP, TOPIC_PREFIX, USER_NAME, USER_PASSWORD, OWN_TOPIC, ROUTED_TOPIC.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import check, env, fail, finish, step  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC_AUTHORIZATION_FAILED = 29

bootstrap, _ = env()
user, password = os.environ["USER_NAME"], os.environ["USER_PASSWORD"]
own, routed = os.environ["OWN_TOPIC"], os.environ["ROUTED_TOPIC"]
admin = AdminClient({
    "bootstrap.servers": bootstrap,
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": user,
    "sasl.password": password,
})


def create(name):
    """None when created, else the Kafka error code."""
    try:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        return None
    except KafkaException as e:
        return e.args[0].code()


step(f"create {own} in the default stream")
got = create(own)
check(got is None, f"creating {own} (the user's own stream) failed with error {got}")
step(f"create {routed}, which the topic map routes into another stream")
got = create(routed)
check(got == TOPIC_AUTHORIZATION_FAILED,
      f"creating {routed} in a stream the user may not manage gave {got}, "
      f"expected TOPIC_AUTHORIZATION_FAILED ({TOPIC_AUTHORIZATION_FAILED})")
if got is None:
    fail("the topic was created in a stream the user may not manage")
finish("iggy_stream_scope_confluent")
