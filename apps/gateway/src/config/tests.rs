//! The whole configuration through [`load`]: layers, names in errors, defaults, docs.

use super::*;
use figment::value::Dict;
use kafka_broker::store::TopicConfig;
use kafka_broker::store::memory::CleanerConfig;
use std::io::Write as _;
use std::time::Duration;

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    settings_from_env(pairs.iter().copied())
}

pub(super) fn toml_file(contents: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(contents.as_bytes()).unwrap();
    file
}

pub(super) fn load_err(file: Option<&Path>, pairs: &[(&str, &str)]) -> String {
    let message = load(file, env(pairs)).unwrap_err().to_string();
    assert!(!message.contains('\n'), "not one line: {message}");
    message
}

/// Every section's defaults in one dictionary, keyed like the file.
fn defaults() -> Dict {
    fn dict<T: serde::Serialize>(section: T) -> Dict {
        Value::serialize(section).unwrap().into_dict().unwrap()
    }
    [
        dict(listener::Raw::default()),
        dict(limits::Raw::default()),
        dict(timeouts::Raw::default()),
        dict(topics::Raw::default()),
        dict(groups::Raw::default()),
        dict(memory::Raw::default()),
        dict(bridge::Raw::default()),
        dict(logging::Raw::default()),
        dict(quotas::Raw::default()),
        dict(security::Raw::default()),
        dict(authorization::Raw::default()),
        dict(cluster::Raw::default()),
        dict(inter_gateway::Raw::default()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn defaults_are_the_broker_defaults() {
    let config = load(None, Vec::new()).unwrap();
    let defaults = BrokerConfig::default();
    assert_eq!(config.listeners[0].bind, "127.0.0.1:9093".parse().unwrap());
    assert_eq!(config.advertised_port, None);
    assert_eq!(config.broker.advertised_host, "127.0.0.1");
    assert_eq!(config.broker.node_id, defaults.node_id);
    assert_eq!(config.broker.cluster_id, defaults.cluster_id);
    assert_eq!(config.broker.instance_id, 0);
    assert!(config.broker.auto_create_topics);
    assert_eq!(config.broker.auto_create_partitions, 1);
    assert_eq!(
        config.broker.default_topic_config,
        defaults.default_topic_config
    );
    assert_eq!(
        format!("{:?}", config.broker.limits),
        format!("{:?}", defaults.limits)
    );
    assert_eq!(
        format!("{:?}", config.broker.timeouts),
        format!("{:?}", defaults.timeouts)
    );
    assert!(matches!(
        &config.backend,
        Backend::Memory(m) if *m == MemoryStoreConfig::default()
    ));
    assert_eq!(config.metrics_addr, None);
    assert_eq!(config.log_format, LogFormat::Text);
    assert!(config.warnings.is_empty());
    assert_eq!(config.config_file, None);
}

#[test]
fn keys_follow_the_struct_and_are_all_documented() {
    let keys = keys();
    assert!(keys.len() >= 30, "{keys:?}");
    for expected in [
        "bind_addr",
        "advertised_host",
        "advertised_port",
        "max_connections",
        "max_frame_size",
        "idle_timeout_secs",
        "read_timeout_secs",
        "write_timeout_secs",
        "shutdown_drain_timeout_secs",
        "instance_id",
        "bridge_enabled",
        "auto_create_topics_enabled",
        "auto_create_topics_partitions",
        "iggy_addr",
        "iggy_username",
        "iggy_password",
        "iggy_stream",
        "topic_map_path",
        "iggy_sessions",
        "iggy_metadata_max_age_ms",
        "iggy_read_ahead_bytes",
        "iggy_send_batch_bytes",
        "metrics_addr",
        "log_format",
    ] {
        assert!(keys.contains(&expected), "{expected} missing");
    }
    let docs = include_str!("../../../../docs/configuration.md");
    for key in keys {
        let row = format!("| `{}` | `{key}` |", env_name(key));
        assert!(
            docs.contains(&row),
            "docs/configuration.md lacks the row {row}"
        );
    }
}

#[test]
fn documented_defaults_are_the_real_ones() {
    let docs = include_str!("../../../../docs/configuration.md");
    let defaults = defaults();
    let mut checked = 0;
    for key in keys() {
        let text = match defaults.get(*key) {
            Some(Value::String(_, s)) => s.clone(),
            Some(Value::Num(_, n)) => n
                .to_u128()
                .map(|n| n.to_string())
                .or_else(|| n.to_i128().map(|n| n.to_string()))
                .or_else(|| n.to_f64().map(|n| n.to_string()))
                .unwrap_or_else(|| panic!("{key}: {n:?}")),
            Some(Value::Bool(_, b)) => b.to_string(),
            // Unset options are described in words.
            _ => continue,
        };
        let row = format!("| `{}` | `{key}` | `{text}`", env_name(key));
        assert!(docs.contains(&row), "docs/configuration.md lacks {row}");
        checked += 1;
    }
    assert!(checked >= 25, "{checked}");
}

#[test]
fn environment_selection() {
    let settings = env(&[
        ("IGGY_KAFKA_MAX_CONNECTIONS", "5"),
        ("IGGY_KAFKA_CONFIG", "/etc/gateway.toml"),
        ("IGGY_KAFKA_ADVERTISED_HOST", "  "),
        ("IGGY_KAFKAX_OTHER", "1"),
        ("PATH", "/bin"),
    ]);
    assert_eq!(
        settings,
        vec![("max_connections".to_string(), "5".to_string())]
    );
}

#[test]
fn environment_overrides_file_which_overrides_defaults() {
    let file = toml_file(
        r#"
        max_connections = 10
        idle_timeout_secs = 5
        advertised_host = "file.example"
        auto_create_topics_enabled = false
        "#,
    );
    let config = load(
        Some(file.path()),
        env(&[
            ("IGGY_KAFKA_MAX_CONNECTIONS", "20"),
            ("IGGY_KAFKA_ADVERTISED_PORT", "19092"),
        ]),
    )
    .unwrap();
    // Environment wins over the file.
    assert_eq!(config.broker.limits.max_connections, 20);
    // The file wins over the defaults.
    assert_eq!(config.broker.timeouts.idle, Duration::from_secs(5));
    assert_eq!(config.broker.advertised_host, "file.example");
    assert!(!config.broker.auto_create_topics);
    // Untouched keys keep their defaults.
    assert_eq!(
        config.broker.timeouts.read,
        BrokerConfig::default().timeouts.read
    );
    assert_eq!(config.advertised_port, Some(19092));
    assert_eq!(config.broker_config(40000).advertised_port, 19092);
    assert_eq!(config.config_file.as_deref(), Some(file.path()));
}

#[test]
fn file_values_may_be_strings_and_env_values_stay_verbatim() {
    let file = toml_file("max_connections = \"100\"\ncluster_id = \"from-file\"\n");
    let config = load(
        Some(file.path()),
        env(&[
            // figment's own Env provider would read these as a number and an array.
            ("IGGY_KAFKA_CLUSTER_ID", "007"),
            ("IGGY_KAFKA_IGGY_PASSWORD", " [secret] "),
        ]),
    )
    .unwrap();
    assert_eq!(config.broker.limits.max_connections, 100);
    assert_eq!(config.broker.cluster_id, "007");
}

#[test]
fn the_bound_port_is_advertised_unless_one_is_set() {
    let config = load(None, env(&[("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:0")])).unwrap();
    assert_eq!(config.listeners[0].bind.port(), 0);
    assert_eq!(config.broker_config(45678).advertised_port, 45678);
    assert_eq!(config.broker_config(45678).advertised_host, "127.0.0.1");
}

#[test]
fn wildcard_bind_needs_an_advertised_host() {
    for wildcard in ["0.0.0.0:9093", "[::]:9093"] {
        let message = load_err(None, &[("IGGY_KAFKA_BIND_ADDR", wildcard)]);
        assert!(message.contains("IGGY_KAFKA_ADVERTISED_HOST"), "{message}");
        assert!(message.contains("IGGY_KAFKA_BIND_ADDR"), "{message}");
        let config = load(
            None,
            env(&[
                ("IGGY_KAFKA_BIND_ADDR", wildcard),
                ("IGGY_KAFKA_ADVERTISED_HOST", "gw.example"),
            ]),
        )
        .unwrap();
        assert_eq!(config.broker.advertised_host, "gw.example");
    }
    let message = load_err(None, &[("IGGY_KAFKA_ADVERTISED_HOST", "0.0.0.0")]);
    assert!(message.contains("IGGY_KAFKA_ADVERTISED_HOST"), "{message}");
}

#[test]
fn bad_environment_values_name_the_variable() {
    for (var, value) in [
        ("IGGY_KAFKA_MAX_CONNECTIONS", "abc"),
        ("IGGY_KAFKA_MAX_CONNECTIONS", "0"),
        ("IGGY_KAFKA_MAX_CONNECTIONS", "-1"),
        ("IGGY_KAFKA_BIND_ADDR", "localhost"),
        ("IGGY_KAFKA_ADVERTISED_PORT", "0"),
        ("IGGY_KAFKA_ADVERTISED_PORT", "65536"),
        ("IGGY_KAFKA_INSTANCE_ID", "65536"),
        ("IGGY_KAFKA_NODE_ID", "-1"),
        ("IGGY_KAFKA_CLUSTER_ID", "has space"),
        ("IGGY_KAFKA_MAX_FRAME_SIZE", "100"),
        ("IGGY_KAFKA_MAX_FRAME_SIZE", "4294967296"),
        ("IGGY_KAFKA_MAX_IN_FLIGHT_PER_CONNECTION", "0"),
        ("IGGY_KAFKA_MAX_PARTITIONS_PER_TOPIC", "0"),
        ("IGGY_KAFKA_MAX_FETCH_WAIT_MS", "1e3"),
        ("IGGY_KAFKA_IDLE_TIMEOUT_SECS", "0"),
        ("IGGY_KAFKA_READ_TIMEOUT_SECS", "999999999"),
        ("IGGY_KAFKA_WRITE_TIMEOUT_SECS", "1.5"),
        ("IGGY_KAFKA_AUTO_CREATE_TOPICS_ENABLED", "yes"),
        ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "0"),
        ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "1001"),
        ("IGGY_KAFKA_DEFAULT_RETENTION_MS", "0"),
        ("IGGY_KAFKA_DEFAULT_RETENTION_BYTES", "-2"),
        ("IGGY_KAFKA_DEFAULT_MAX_MESSAGE_BYTES", "0"),
        ("IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES", "0"),
        ("IGGY_KAFKA_MEMORY_MAX_TOPICS", "0"),
        ("IGGY_KAFKA_MEMORY_RETENTION_CHECK_INTERVAL_MS", "0"),
        ("IGGY_KAFKA_BRIDGE_ENABLED", "1"),
        ("IGGY_KAFKA_MAX_BUFFERED_REQUEST_BYTES", "1024"),
        ("IGGY_KAFKA_MAX_RECORDS_PER_BATCH", "0"),
        ("IGGY_KAFKA_MAX_RECORDS_PER_BATCH", "2147483648"),
        ("IGGY_KAFKA_MAX_DECOMPRESSED_BATCH_BYTES", "0"),
        ("IGGY_KAFKA_MAX_FETCH_WAIT_MS", "604800001"),
        ("IGGY_KAFKA_SHUTDOWN_DRAIN_TIMEOUT_SECS", "604801"),
        ("IGGY_KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "1800001"),
        ("IGGY_KAFKA_GROUP_MAX_GROUPS", "0"),
        ("IGGY_KAFKA_GROUP_MAX_MEMBERS", "0"),
        ("IGGY_KAFKA_MEMORY_RETENTION_CHECK_INTERVAL_MS", "604800001"),
        ("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "0"),
        ("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "604800001"),
        ("IGGY_KAFKA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND", "0"),
        ("IGGY_KAFKA_LOG_CLEANER_DEDUPE_BUFFER_SIZE", "1023"),
        ("IGGY_KAFKA_LOG_CLEANER_ENABLE", "maybe"),
        ("IGGY_KAFKA_METRICS_ADDR", "localhost:9100"),
        ("IGGY_KAFKA_LOG_FORMAT", "xml"),
    ] {
        let message = load_err(None, &[(var, value)]);
        assert!(
            message.starts_with(&format!("{var}={value:?}: ")),
            "{var}={value}: {message}"
        );
    }
}

#[test]
fn bad_file_values_name_the_key_and_the_file() {
    let file = toml_file("max_connections = 0\n");
    let message = load_err(Some(file.path()), &[]);
    assert_eq!(
        message,
        format!(
            "max_connections in {}: must be at least 1",
            file.path().display()
        )
    );

    let file = toml_file("max_connections = \"many\"\n");
    let message = load_err(Some(file.path()), &[]);
    assert!(message.starts_with("max_connections in "), "{message}");

    // The environment overrides a bad file value, and is then what gets checked.
    let file = toml_file("max_connections = 0\n");
    assert!(
        load(
            Some(file.path()),
            env(&[("IGGY_KAFKA_MAX_CONNECTIONS", "3")])
        )
        .is_ok()
    );
}

#[test]
fn unknown_variables_are_warned_about_unknown_file_keys_refused() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_SERVICE_HOST", "10.0.0.1"),
            ("IGGY_KAFKA_PORT", "tcp://10.0.0.1:9093"),
        ]),
    )
    .unwrap();
    assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
    assert!(config.warnings[0].starts_with("IGGY_KAFKA_PORT is not a setting"));
    assert!(config.warnings[1].starts_with("IGGY_KAFKA_SERVICE_HOST is not a setting"));

    let file = toml_file("max_conections = 3\n");
    let message = load_err(Some(file.path()), &[]);
    assert!(
        message.contains("unknown key \"max_conections\""),
        "{message}"
    );

    let file = toml_file("MAX_CONNECTIONS = 3\n");
    let message = load_err(Some(file.path()), &[]);
    assert!(message.contains("keys are lower case"), "{message}");

    let file = toml_file("[server]\nbind_addr = \"127.0.0.1:1\"\n");
    let message = load_err(Some(file.path()), &[]);
    assert!(message.contains("unknown key \"server\""), "{message}");
}

#[test]
fn unreadable_or_malformed_files_are_refused() {
    let message = load_err(Some(Path::new("/nonexistent/gateway.toml")), &[]);
    assert!(
        message.starts_with("cannot read config file /nonexistent/gateway.toml"),
        "{message}"
    );

    let file = toml_file("max_connections = \n");
    let message = load_err(Some(file.path()), &[]);
    assert!(message.contains("is not valid TOML"), "{message}");
    assert!(message.contains("line 1"), "{message}");
}

#[test]
fn bridge_needs_a_password_and_takes_the_iggy_settings() {
    let message = load_err(
        None,
        &[
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_ADDR", "127.0.0.1:8090"),
        ],
    );
    assert!(message.contains("IGGY_KAFKA_IGGY_PASSWORD"), "{message}");
    // The rule and its words are the bridge's; the gateway names the variable.
    assert!(message.contains("is required"), "{message}");
    assert!(message.contains("no default"), "{message}");

    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_ADDR", "10.1.2.3:9090"),
            ("IGGY_KAFKA_IGGY_USERNAME", "gateway"),
            ("IGGY_KAFKA_IGGY_PASSWORD", "s3cret [x]"),
            ("IGGY_KAFKA_IGGY_STREAM", "events"),
            ("IGGY_KAFKA_IGGY_SESSIONS", "8"),
            ("IGGY_KAFKA_IGGY_METADATA_MAX_AGE_MS", "0"),
            ("IGGY_KAFKA_IGGY_READ_AHEAD_BYTES", "0"),
            ("IGGY_KAFKA_IGGY_SEND_BATCH_BYTES", "262144"),
        ]),
    )
    .expect("valid bridge settings");
    let Backend::Iggy(b) = &config.backend else {
        panic!("expected the Iggy backend, got {:?}", config.backend);
    };
    assert_eq!(b.address, "10.1.2.3:9090");
    assert_eq!(b.username, "gateway");
    assert_eq!(b.password, "s3cret [x]");
    assert_eq!(b.stream, "events");
    assert_eq!(b.sessions, 8);
    assert_eq!(b.metadata_max_age, Duration::ZERO);
    assert_eq!(b.read_ahead_bytes, 0);
    assert_eq!(b.send_batch_bytes, 262_144);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);

    let file = toml_file("bridge_enabled = true\n");
    let message = load_err(Some(file.path()), &[]);
    assert!(message.contains("IGGY_KAFKA_IGGY_PASSWORD"), "{message}");
}

#[test]
fn bridge_settings_without_the_bridge_are_reported_as_ignored() {
    let file = toml_file("iggy_stream = \"kafka\"\n");
    let config = load(
        Some(file.path()),
        env(&[
            ("IGGY_KAFKA_IGGY_ADDR", "127.0.0.1:8090"),
            ("IGGY_KAFKA_TOPIC_MAP_PATH", "/etc/map.toml"),
        ]),
    )
    .unwrap();
    let suffix = " has no effect: the Iggy bridge is disabled";
    assert_eq!(
        config.warnings,
        vec![
            format!("IGGY_KAFKA_IGGY_ADDR{suffix}"),
            format!("iggy_stream in {}{suffix}", file.path().display()),
            format!("IGGY_KAFKA_TOPIC_MAP_PATH{suffix}"),
        ]
    );
}

#[test]
fn drain_timeout_may_be_zero() {
    let config = load(
        None,
        env(&[("IGGY_KAFKA_SHUTDOWN_DRAIN_TIMEOUT_SECS", "0")]),
    )
    .unwrap();
    assert_eq!(config.broker.timeouts.shutdown_drain, Duration::ZERO);
}

#[test]
fn every_setting_reaches_the_broker_and_store() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_BIND_ADDR", "[::1]:0"),
            ("IGGY_KAFKA_NODE_ID", "7"),
            ("IGGY_KAFKA_CLUSTER_ID", "c1"),
            ("IGGY_KAFKA_INSTANCE_ID", "65535"),
            ("IGGY_KAFKA_MAX_CONNECTIONS", "11"),
            ("IGGY_KAFKA_MAX_FRAME_SIZE", "2048"),
            ("IGGY_KAFKA_MAX_IN_FLIGHT_PER_CONNECTION", "3"),
            ("IGGY_KAFKA_MAX_PARTITIONS_PER_TOPIC", "50"),
            ("IGGY_KAFKA_MAX_TOPICS_PER_REQUEST", "4"),
            ("IGGY_KAFKA_MAX_FETCH_RESPONSE_BYTES", "5000"),
            ("IGGY_KAFKA_MAX_FETCH_WAIT_MS", "250"),
            ("IGGY_KAFKA_MAX_DECOMPRESSED_BATCH_BYTES", "6000"),
            ("IGGY_KAFKA_MAX_RECORDS_PER_BATCH", "70"),
            ("IGGY_KAFKA_IDLE_TIMEOUT_SECS", "8"),
            ("IGGY_KAFKA_READ_TIMEOUT_SECS", "9"),
            ("IGGY_KAFKA_WRITE_TIMEOUT_SECS", "10"),
            ("IGGY_KAFKA_SHUTDOWN_DRAIN_TIMEOUT_SECS", "12"),
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_ENABLED", "false"),
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "50"),
            ("IGGY_KAFKA_DEFAULT_RETENTION_MS", "-1"),
            ("IGGY_KAFKA_DEFAULT_RETENTION_BYTES", "1000000"),
            ("IGGY_KAFKA_DEFAULT_MAX_MESSAGE_BYTES", "4096"),
            ("IGGY_KAFKA_MEMORY_MAX_TOTAL_BYTES", "123456"),
            ("IGGY_KAFKA_MEMORY_MAX_TOPICS", "13"),
            ("IGGY_KAFKA_MEMORY_RETENTION_CHECK_INTERVAL_MS", "500"),
            ("IGGY_KAFKA_LOG_CLEANER_ENABLE", "false"),
            ("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "250"),
            ("IGGY_KAFKA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND", "1048576"),
            ("IGGY_KAFKA_LOG_CLEANER_DEDUPE_BUFFER_SIZE", "65536"),
            ("IGGY_KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "100"),
            ("IGGY_KAFKA_GROUP_MAX_SESSION_TIMEOUT_MS", "200"),
            ("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0"),
            ("IGGY_KAFKA_GROUP_MAX_GROUPS", "14"),
            ("IGGY_KAFKA_GROUP_MAX_MEMBERS", "15"),
            ("IGGY_KAFKA_GROUP_LOAD_WAIT_MS", "250"),
            ("IGGY_KAFKA_QUOTA_PRODUCER_BYTE_RATE", "16"),
            ("IGGY_KAFKA_QUOTA_CONSUMER_BYTE_RATE", "17"),
            ("IGGY_KAFKA_QUOTA_REQUEST_PERCENTAGE", "18.5"),
            ("IGGY_KAFKA_QUOTA_WINDOW_NUM", "19"),
            ("IGGY_KAFKA_QUOTA_WINDOW_SIZE_MS", "200"),
            ("IGGY_KAFKA_QUOTA_MAX_TRACKED_CLIENTS", "21"),
            ("IGGY_KAFKA_QUOTA_MAX_ENTITIES", "22"),
            ("IGGY_KAFKA_QUOTA_ALTER_ENABLED", "false"),
        ]),
    )
    .unwrap();
    let broker = config.broker_config(4321);
    assert_eq!(
        broker.quotas,
        kafka_broker::quotas::QuotaConfig {
            producer_byte_rate: 16,
            consumer_byte_rate: 17,
            request_percentage: 18.5,
            window_samples: 19,
            window_size: Duration::from_millis(200),
            max_tracked_clients: 21,
            max_entities: 22,
            alter_enabled: false,
        }
    );
    assert_eq!(config.listeners[0].bind, "[::1]:0".parse().unwrap());
    assert_eq!(broker.advertised_host, "::1");
    assert_eq!(broker.advertised_port, 4321);
    assert_eq!(broker.node_id, 7);
    assert_eq!(broker.cluster_id, "c1");
    assert_eq!(broker.instance_id, 65535);
    let l = &broker.limits;
    assert_eq!(
        (
            l.max_connections,
            l.max_frame_size,
            l.max_in_flight_per_connection,
            l.max_partitions_per_topic,
            l.max_topics_per_request,
            l.max_fetch_response_bytes,
            l.max_fetch_wait,
            l.max_decompressed_batch_bytes,
            l.max_records_per_batch,
        ),
        (
            11,
            2048,
            3,
            50,
            4,
            5000,
            Duration::from_millis(250),
            6000,
            70
        )
    );
    let t = &broker.timeouts;
    assert_eq!(
        (t.idle, t.read, t.write, t.shutdown_drain),
        (
            Duration::from_secs(8),
            Duration::from_secs(9),
            Duration::from_secs(10),
            Duration::from_secs(12)
        )
    );
    assert!(!broker.auto_create_topics);
    assert_eq!(broker.auto_create_partitions, 50);
    assert_eq!(
        broker.default_topic_config,
        TopicConfig {
            retention_ms: -1,
            retention_bytes: 1_000_000,
            max_message_bytes: 4096,
            ..TopicConfig::default()
        }
    );
    let expected = MemoryStoreConfig {
        max_topics: 13,
        max_total_bytes: 123_456,
        retention_check_interval: Duration::from_millis(500),
        cleaner: CleanerConfig {
            enable: false,
            backoff: Duration::from_millis(250),
            io_max_bytes_per_second: Some(1 << 20),
            dedupe_buffer_size: 65_536,
        },
    };
    assert!(matches!(&config.backend, Backend::Memory(m) if *m == expected));
    let g = &broker.groups;
    assert_eq!(
        (
            g.min_session_timeout,
            g.max_session_timeout,
            g.initial_rebalance_delay,
            g.max_groups,
            g.max_members_per_group,
        ),
        (
            Duration::from_millis(100),
            Duration::from_millis(200),
            Duration::ZERO,
            14,
            15
        )
    );
    assert_eq!(broker.group_state.load_wait, Duration::from_millis(250));
}

#[test]
fn broker_rules_are_the_brokers_with_the_setting_named() {
    // The gateway has no words of its own for these rules: the message is the broker's
    // reason after the variable.
    let mut broker = BrokerConfig::default();
    broker.limits.max_frame_size = 100;
    let reason = broker.check().unwrap_err().reason;
    assert_eq!(
        load_err(None, &[("IGGY_KAFKA_MAX_FRAME_SIZE", "100")]),
        format!("IGGY_KAFKA_MAX_FRAME_SIZE=\"100\": {reason}")
    );
    assert!(reason.contains("between 1024 and 2147483647"), "{reason}");

    // A rule tying two settings names the one the broker reports, even at its default.
    let message = load_err(None, &[("IGGY_KAFKA_MAX_FRAME_SIZE", "1073741824")]);
    assert!(
        message.starts_with("IGGY_KAFKA_MAX_BUFFERED_REQUEST_BYTES (default): "),
        "{message}"
    );
    assert!(message.contains("1073741828"), "{message}");

    // Every broker field a setting fills is named by that setting.
    let file = toml_file("idle_timeout_secs = 0\n");
    assert_eq!(
        load_err(Some(file.path()), &[]),
        format!(
            "idle_timeout_secs in {}: must be above zero",
            file.path().display()
        )
    );
}

#[test]
fn one_line_keeps_position_and_reason() {
    assert_eq!(one_line("just this"), "just this");
    assert_eq!(
        one_line("TOML parse error at line 1, column 5\n  |\n1 | a =\n  |    ^\ninvalid string\n"),
        "TOML parse error at line 1, column 5: invalid string"
    );
}

#[test]
fn produce_and_producer_settings_reach_the_broker() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_MAX_PRODUCE_TIMEOUT_MS", "1500"),
            ("IGGY_KAFKA_MESSAGE_TIMESTAMP_BEFORE_MAX_MS", "1000"),
            ("IGGY_KAFKA_MESSAGE_TIMESTAMP_AFTER_MAX_MS", "2000"),
            ("IGGY_KAFKA_PRODUCER_ID_EXPIRATION_MS", "3000"),
            ("IGGY_KAFKA_MAX_PRODUCER_STATES", "40"),
            ("IGGY_KAFKA_VALIDATION_THREADS", "3"),
            ("IGGY_KAFKA_INLINE_VALIDATION_BYTES", "500"),
            ("IGGY_KAFKA_FRAME_POOL_BYTES", "0"),
            ("IGGY_KAFKA_FRAME_POOL_IDLE_MS", "2500"),
            ("IGGY_KAFKA_MAX_DECOMPRESSED_REQUEST_BYTES", "6000"),
            ("IGGY_KAFKA_MAX_LIST_OFFSETS_PARTITIONS", "90"),
        ]),
    )
    .unwrap();
    let l = config.broker_config(1).limits;
    assert_eq!(
        (
            l.max_produce_timeout,
            l.message_timestamp_before_max_ms,
            l.message_timestamp_after_max_ms,
            l.producer_id_expiration,
            l.max_producer_states,
            l.validation_threads,
            l.inline_validation_bytes,
            l.frame_pool_bytes,
            l.frame_pool_idle,
            l.max_decompressed_request_bytes,
            l.max_list_offsets_partitions,
        ),
        (
            Duration::from_millis(1500),
            1000,
            2000,
            Duration::from_millis(3000),
            40,
            3,
            500,
            0,
            Duration::from_millis(2500),
            6000,
            90
        )
    );
    let message = load_err(None, &[("IGGY_KAFKA_VALIDATION_THREADS", "0")]);
    assert!(
        message.starts_with("IGGY_KAFKA_VALIDATION_THREADS")
            && message.ends_with("must be at least 1"),
        "{message}"
    );
}

#[test]
fn the_producer_state_recovery_window_reaches_the_broker() {
    for (value, bytes) in [("65536", 65_536), ("0", 0)] {
        let config = load(
            None,
            env(&[("IGGY_KAFKA_PRODUCER_STATE_RECOVERY_BYTES", value)]),
        )
        .unwrap();
        assert_eq!(
            config.broker_config(1).limits.producer_state_recovery_bytes,
            bytes
        );
    }
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_MAX_CONCURRENT_PRODUCER_RECOVERIES", "3"),
            ("IGGY_KAFKA_PRODUCER_STATE_RECOVERY_LAG_WAIT_MS", "0"),
        ]),
    )
    .unwrap();
    let limits = config.broker_config(1).limits;
    assert_eq!(limits.max_concurrent_producer_recoveries, 3);
    assert_eq!(limits.producer_state_recovery_lag_wait, Duration::ZERO);
    let message = load_err(
        None,
        &[("IGGY_KAFKA_PRODUCER_STATE_RECOVERY_LAG_WAIT_MS", "300001")],
    );
    assert!(
        message.ends_with("must be at most 300 seconds"),
        "{message}"
    );
    let message = load_err(
        None,
        &[("IGGY_KAFKA_MAX_CONCURRENT_PRODUCER_RECOVERIES", "0")],
    );
    assert!(message.ends_with("must be at least 1"), "{message}");
    let message = load_err(
        None,
        &[("IGGY_KAFKA_PRODUCER_STATE_RECOVERY_BYTES", "4294967296")],
    );
    assert!(
        message.starts_with("IGGY_KAFKA_PRODUCER_STATE_RECOVERY_BYTES")
            && message.contains("at most 2147483647"),
        "{message}"
    );
}

fn spec(config: &GatewayConfig) -> Vec<(String, &'static str, String, String, Option<u16>)> {
    config
        .listeners
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.protocol.name(),
                l.bind.to_string(),
                l.advertise.host.clone(),
                l.advertise.port,
            )
        })
        .collect()
}

fn users_file() -> tempfile::NamedTempFile {
    toml_file("{}")
}

#[test]
fn the_single_listener_is_plaintext_sasl_ssl_or_both() {
    let config = load(None, env(&[])).unwrap();
    assert_eq!(
        spec(&config),
        [(
            "PLAINTEXT".into(),
            "PLAINTEXT",
            "127.0.0.1:9093".into(),
            "127.0.0.1".into(),
            None
        )]
    );
    assert!(config.sasl.is_none() && config.tls.is_none());
    assert!(!config.kafka_style_listeners);

    let users = users_file();
    let users_path = users.path().to_str().unwrap();
    let file = ("IGGY_KAFKA_SASL_USERS_FILE", users_path);
    let tls = [
        ("IGGY_KAFKA_TLS_CERT_FILE", "/etc/gw/cert.pem"),
        ("IGGY_KAFKA_TLS_KEY_FILE", "/etc/gw/key.pem"),
    ];
    let config = load(None, env(&[("IGGY_KAFKA_SASL_ENABLED", "true"), file])).unwrap();
    assert_eq!(config.listeners[0].protocol.name(), "SASL_PLAINTEXT");
    assert_eq!(config.listeners[0].name, "SASL_PLAINTEXT");
    let sasl = config.sasl.unwrap();
    assert_eq!(sasl.users_file.as_deref(), Some(users.path()));
    assert!(sasl.oauth.is_none());

    let config = load(
        None,
        env(&[&[("IGGY_KAFKA_TLS_ENABLED", "true")], &tls[..]].concat()),
    )
    .unwrap();
    assert_eq!(config.listeners[0].protocol.name(), "SSL");
    let settings = config.tls.unwrap();
    assert_eq!(settings.cert_file, Path::new("/etc/gw/cert.pem"));
    assert_eq!(settings.reload_interval, Duration::from_secs(5));
    assert_eq!(settings.handshake_timeout, Duration::from_secs(10));
    assert!(config.sasl.is_none());

    let config = load(
        None,
        env(&[
            &[
                ("IGGY_KAFKA_TLS_ENABLED", "true"),
                ("IGGY_KAFKA_SASL_ENABLED", "true"),
                file,
            ],
            &tls[..],
        ]
        .concat()),
    )
    .unwrap();
    assert_eq!(config.listeners[0].protocol.name(), "SASL_SSL");
    assert!(config.sasl.is_some() && config.tls.is_some());
}

#[test]
fn a_sasl_listener_needs_credentials_and_a_tls_one_a_certificate() {
    let message = load_err(None, &[("IGGY_KAFKA_SASL_ENABLED", "true")]);
    assert!(
        message.starts_with("IGGY_KAFKA_SASL_USERS_FILE (default): "),
        "{message}"
    );
    assert!(message.contains("users set-password"), "{message}");
    // OAUTHBEARER alone needs no users file, but keys or the development switch.
    let message = load_err(
        None,
        &[
            ("IGGY_KAFKA_SASL_ENABLED", "true"),
            ("IGGY_KAFKA_SASL_MECHANISMS", "OAUTHBEARER"),
        ],
    );
    assert!(
        message.starts_with("IGGY_KAFKA_SASL_OAUTHBEARER_JWKS_FILE"),
        "{message}"
    );
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_SASL_ENABLED", "true"),
            ("IGGY_KAFKA_SASL_MECHANISMS", "oauthbearer"),
            ("IGGY_KAFKA_SASL_OAUTHBEARER_ALLOW_UNSECURED", "true"),
        ]),
    )
    .unwrap();
    let sasl = config.sasl.unwrap();
    assert_eq!(sasl.config.mechanisms, [kafka_sasl::Mechanism::OAuthBearer]);
    let oauth = sasl.oauth.unwrap();
    assert!(oauth.allow_unsecured);
    assert_eq!(oauth.principal_claim, "sub");
    assert_eq!(oauth.clock_skew, Duration::from_secs(30));
    assert!(
        config
            .warnings
            .iter()
            .any(|w| w.contains("ALLOW_UNSECURED")),
        "{:?}",
        config.warnings
    );

    let message = load_err(None, &[("IGGY_KAFKA_TLS_ENABLED", "true")]);
    assert!(
        message.starts_with("IGGY_KAFKA_TLS_CERT_FILE (default): "),
        "{message}"
    );
    let message = load_err(
        None,
        &[
            ("IGGY_KAFKA_TLS_ENABLED", "true"),
            ("IGGY_KAFKA_TLS_CERT_FILE", "c.pem"),
        ],
    );
    assert!(
        message.starts_with("IGGY_KAFKA_TLS_KEY_FILE (default): "),
        "{message}"
    );
}

#[test]
fn a_listener_host_name_binds_the_address_it_resolves_to() {
    let config = load(
        None,
        env(&[("IGGY_KAFKA_LISTENERS", "PLAINTEXT://localhost:9093")]),
    )
    .unwrap();
    let bound = spec(&config);
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].2, "127.0.0.1:9093");
}

#[test]
fn kafka_style_listeners_with_a_protocol_map_and_advertised_addresses() {
    let users = users_file();
    let config = load(
        None,
        env(&[
            (
                "IGGY_KAFKA_LISTENERS",
                "SASL_SSL://0.0.0.0:9094, internal://127.0.0.1:9093,CLIENTS://[::1]:0",
            ),
            (
                "IGGY_KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                "INTERNAL:PLAINTEXT,clients:ssl",
            ),
            (
                "IGGY_KAFKA_ADVERTISED_LISTENERS",
                "SASL_SSL://kafka.example.com:19094",
            ),
            ("IGGY_KAFKA_TLS_CERT_FILE", "c.pem"),
            ("IGGY_KAFKA_TLS_KEY_FILE", "k.pem"),
            ("IGGY_KAFKA_SASL_USERS_FILE", users.path().to_str().unwrap()),
        ]),
    )
    .unwrap();
    assert!(config.kafka_style_listeners);
    assert_eq!(
        spec(&config),
        [
            (
                "SASL_SSL".into(),
                "SASL_SSL",
                "0.0.0.0:9094".into(),
                "kafka.example.com".into(),
                Some(19094)
            ),
            (
                "INTERNAL".into(),
                "PLAINTEXT",
                "127.0.0.1:9093".into(),
                "127.0.0.1".into(),
                None
            ),
            (
                "CLIENTS".into(),
                "SSL",
                "[::1]:0".into(),
                "::1".into(),
                None
            ),
        ]
    );
    // The broker's own address is the first listener's.
    assert_eq!(config.broker.advertised_host, "kafka.example.com");
    assert_eq!(config.broker_config(1234).advertised_port, 19094);
    assert!(config.sasl.is_some() && config.tls.is_some());
    // Loopback listeners and SASL ones need no warning.
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn listener_mistakes_are_one_line_naming_the_setting() {
    type Vars<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(Vars<'_>, &str, &str)] = &[
        (
            &[
                ("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1:9093"),
                ("IGGY_KAFKA_BIND_ADDR", "127.0.0.1:9092"),
            ],
            "IGGY_KAFKA_BIND_ADDR=",
            "cannot be combined with IGGY_KAFKA_LISTENERS",
        ),
        (
            &[
                ("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1:9093"),
                ("IGGY_KAFKA_SASL_ENABLED", "true"),
            ],
            "IGGY_KAFKA_SASL_ENABLED=",
            "cannot be combined",
        ),
        (
            &[
                ("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1:9093"),
                ("IGGY_KAFKA_TLS_ENABLED", "false"),
            ],
            "IGGY_KAFKA_TLS_ENABLED=",
            "cannot be combined",
        ),
        (
            &[("IGGY_KAFKA_LISTENERS", "EXTERNAL://127.0.0.1:9093")],
            "IGGY_KAFKA_LISTENERS=",
            "LISTENER_SECURITY_PROTOCOL_MAP",
        ),
        (
            &[(
                "IGGY_KAFKA_LISTENERS",
                "PLAINTEXT://no-such-host.invalid:9093",
            )],
            "IGGY_KAFKA_LISTENERS=",
            "neither an IP address nor a host name that resolves",
        ),
        (
            &[("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1")],
            "IGGY_KAFKA_LISTENERS=",
            "no port",
        ),
        (
            &[(
                "IGGY_KAFKA_LISTENERS",
                "PLAINTEXT://127.0.0.1:9093,SSL://0.0.0.0:9093",
            )],
            "IGGY_KAFKA_LISTENERS=",
            "both take port 9093",
        ),
        (
            &[(
                "IGGY_KAFKA_LISTENERS",
                "PLAINTEXT://127.0.0.1:9093,plaintext://127.0.0.1:9094",
            )],
            "IGGY_KAFKA_LISTENERS=",
            "named twice",
        ),
        (
            &[("IGGY_KAFKA_LISTENERS", "PLAINTEXT://0.0.0.0:9093")],
            "IGGY_KAFKA_LISTENERS=",
            "ADVERTISED_LISTENERS",
        ),
        (
            &[
                ("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1:9093"),
                ("IGGY_KAFKA_ADVERTISED_LISTENERS", "OTHER://h:1"),
            ],
            "IGGY_KAFKA_ADVERTISED_LISTENERS=",
            "not one of IGGY_KAFKA_LISTENERS",
        ),
        (
            &[
                ("IGGY_KAFKA_LISTENERS", "A://127.0.0.1:9093"),
                ("IGGY_KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "A:TLS"),
            ],
            "IGGY_KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=",
            "PLAINTEXT, SSL",
        ),
        (
            &[
                ("IGGY_KAFKA_LISTENERS", "PLAINTEXT://127.0.0.1:9093"),
                ("IGGY_KAFKA_METRICS_ADDR", "127.0.0.1:9093"),
            ],
            "IGGY_KAFKA_METRICS_ADDR=",
            "port of listener PLAINTEXT",
        ),
    ];
    for (vars, prefix, reason) in cases {
        let message = load_err(None, vars);
        assert!(message.starts_with(prefix), "{vars:?}: {message}");
        assert!(message.contains(reason), "{vars:?}: {message}");
    }
}

#[test]
fn a_listener_without_authentication_off_loopback_is_warned_about() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_BIND_ADDR", "0.0.0.0:9093"),
            ("IGGY_KAFKA_ADVERTISED_HOST", "gw.example"),
        ]),
    )
    .unwrap();
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("listener PLAINTEXT (PLAINTEXT) on 0.0.0.0:9093"),
        "{:?}",
        config.warnings
    );
    // SSL with client certificates authenticates; SSL without does not.
    let ssl = |ca: bool| {
        let mut vars = vec![
            ("IGGY_KAFKA_LISTENERS", "SSL://10.1.2.3:9094"),
            ("IGGY_KAFKA_TLS_CERT_FILE", "c.pem"),
            ("IGGY_KAFKA_TLS_KEY_FILE", "k.pem"),
        ];
        if ca {
            vars.push(("IGGY_KAFKA_TLS_CLIENT_CA_FILE", "ca.pem"));
        }
        load(None, env(&vars)).unwrap().warnings
    };
    assert_eq!(ssl(false).len(), 1);
    assert!(ssl(true).is_empty(), "{:?}", ssl(true));
}

#[test]
fn sasl_settings_reach_the_broker_and_the_mechanisms() {
    let defaults = kafka_broker::config::SaslSettings::default();
    let config = load(None, env(&[])).unwrap();
    assert_eq!(format!("{:?}", config.broker.sasl), format!("{defaults:?}"));

    let users = users_file();
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_SASL_ENABLED", "true"),
            ("IGGY_KAFKA_SASL_USERS_FILE", users.path().to_str().unwrap()),
            ("IGGY_KAFKA_SASL_MECHANISMS", "SCRAM-SHA-512, plain"),
            ("IGGY_KAFKA_SASL_SESSION_LIFETIME_MS", "60000"),
            ("IGGY_KAFKA_MAX_CONCURRENT_AUTHENTICATIONS", "4"),
            ("IGGY_KAFKA_SASL_AUTHENTICATION_TIMEOUT_MS", "2000"),
            ("IGGY_KAFKA_SASL_MAX_RECEIVE_SIZE", "4096"),
            ("IGGY_KAFKA_SASL_FAILURE_DELAY_MS", "100"),
            ("IGGY_KAFKA_SASL_FAILURE_DELAY_MAX_MS", "1000"),
            ("IGGY_KAFKA_SASL_SCRAM_MIN_ITERATIONS", "8192"),
            ("IGGY_KAFKA_SASL_SCRAM_MAX_ITERATIONS", "20000"),
            ("IGGY_KAFKA_SASL_MAX_TOKEN_BYTES", "1000"),
            ("IGGY_KAFKA_SUPER_USERS", "User:admin; User:ops"),
        ]),
    )
    .unwrap();
    let s = &config.broker.sasl;
    assert_eq!(s.session_lifetime, Some(Duration::from_secs(60)));
    assert_eq!(s.max_concurrent_authentications, 4);
    assert_eq!(s.authentication_timeout, Duration::from_secs(2));
    assert_eq!(s.max_receive_size, 4096);
    assert_eq!(s.failure_delay, Duration::from_millis(100));
    assert_eq!(s.failure_delay_max, Duration::from_secs(1));
    assert_eq!(s.super_users, ["User:admin", "User:ops"]);
    let sasl = config.sasl.unwrap();
    assert_eq!(
        sasl.config.mechanisms,
        [
            kafka_sasl::Mechanism::ScramSha512,
            kafka_sasl::Mechanism::Plain
        ]
    );
    assert_eq!(sasl.config.scram.min_iterations, 8192);
    assert_eq!(sasl.config.scram.max_iterations, 20000);
    assert_eq!(sasl.config.max_token_bytes, 1000);

    for (var, value, reason) in [
        ("IGGY_KAFKA_SUPER_USERS", "admin", "not a principal"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "GSSAPI", "unknown mechanism"),
        (
            "IGGY_KAFKA_SASL_SCRAM_MIN_ITERATIONS",
            "1000",
            "at least 4096",
        ),
        (
            "IGGY_KAFKA_SASL_SCRAM_MAX_ITERATIONS",
            "4095",
            "at least IGGY_KAFKA_SASL_SCRAM_MIN_ITERATIONS",
        ),
        (
            "IGGY_KAFKA_MAX_CONCURRENT_AUTHENTICATIONS",
            "0",
            "at least 1",
        ),
        (
            "IGGY_KAFKA_SASL_FAILURE_DELAY_MAX_MS",
            "10",
            "at least IGGY_KAFKA_SASL_FAILURE_DELAY_MS",
        ),
    ] {
        let message = load_err(
            None,
            &[
                ("IGGY_KAFKA_SASL_ENABLED", "true"),
                ("IGGY_KAFKA_SASL_USERS_FILE", users.path().to_str().unwrap()),
                (var, value),
            ],
        );
        assert!(
            message.starts_with(&format!("{var}={value:?}: ")),
            "{message}"
        );
        assert!(message.contains(reason), "{message}");
    }
}

#[test]
fn tls_settings_reach_the_acceptor() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_TLS_ENABLED", "true"),
            ("IGGY_KAFKA_TLS_CERT_FILE", "c.pem"),
            ("IGGY_KAFKA_TLS_KEY_FILE", "k.pem"),
            ("IGGY_KAFKA_TLS_CLIENT_CA_FILE", "ca.pem"),
            (
                "IGGY_KAFKA_TLS_PRINCIPAL_MAPPING_RULES",
                "RULE:^CN=(.*?),OU=eng.*$/$1/L,DEFAULT",
            ),
            ("IGGY_KAFKA_TLS_RELOAD_INTERVAL_MS", "250"),
            ("IGGY_KAFKA_TLS_HANDSHAKE_TIMEOUT_MS", "1500"),
        ]),
    )
    .unwrap();
    let tls = config.tls.unwrap();
    assert_eq!(tls.client_ca_file.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(tls.reload_interval, Duration::from_millis(250));
    assert_eq!(tls.handshake_timeout, Duration::from_millis(1500));
    assert_eq!(
        tls.principal_mapper
            .map("CN=Alice,OU=eng,O=Example")
            .as_deref(),
        Some("alice")
    );
    let message = load_err(
        None,
        &[
            ("IGGY_KAFKA_TLS_ENABLED", "true"),
            ("IGGY_KAFKA_TLS_CERT_FILE", "c.pem"),
            ("IGGY_KAFKA_TLS_KEY_FILE", "k.pem"),
            ("IGGY_KAFKA_TLS_PRINCIPAL_MAPPING_RULES", "RULE:broken"),
        ],
    );
    assert!(
        message.starts_with("IGGY_KAFKA_TLS_PRINCIPAL_MAPPING_RULES="),
        "{message}"
    );
    // TLS files without a TLS listener do nothing, and say so.
    let config = load(None, env(&[("IGGY_KAFKA_TLS_CERT_FILE", "c.pem")])).unwrap();
    assert!(config.tls.is_none());
    assert!(
        config.warnings[0].starts_with("IGGY_KAFKA_TLS_CERT_FILE has no effect"),
        "{:?}",
        config.warnings
    );
}

#[test]
fn iggy_tls_and_the_plain_cache_reach_the_bridge() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_PASSWORD", "p"),
            ("IGGY_KAFKA_IGGY_TLS_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_TLS_DOMAIN", "iggy.example"),
            ("IGGY_KAFKA_IGGY_TLS_CA_FILE", "/etc/iggy/ca.pem"),
            ("IGGY_KAFKA_IGGY_PLAIN_CACHE_TTL_MS", "1500"),
            ("IGGY_KAFKA_IGGY_PLAIN_CACHE_ENTRIES", "7"),
            ("IGGY_KAFKA_SASL_ENABLED", "true"),
            (
                "IGGY_KAFKA_IGGY_META_SECRET",
                "a-meta-secret-of-at-least-32-bytes!!",
            ),
        ]),
    )
    .unwrap();
    let Backend::Iggy(bridge) = &config.backend else {
        panic!("bridge expected")
    };
    assert!(bridge.tls_enabled);
    assert_eq!(bridge.tls_domain.as_deref(), Some("iggy.example"));
    assert_eq!(
        bridge.tls_ca_file.as_deref(),
        Some(Path::new("/etc/iggy/ca.pem"))
    );
    assert_eq!(bridge.plain_cache_ttl, Duration::from_millis(1500));
    assert_eq!(bridge.plain_cache_entries, 7);
    // With the bridge, credentials come from Iggy: no users file needed.
    assert!(config.sasl.unwrap().users_file.is_none());

    let message = load_err(
        None,
        &[
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_PASSWORD", "p"),
            ("IGGY_KAFKA_IGGY_TLS_DOMAIN", "iggy.example"),
        ],
    );
    assert!(
        message.starts_with("IGGY_KAFKA_IGGY_TLS_DOMAIN="),
        "{message}"
    );
}

#[test]
fn a_jwks_file_offers_oauthbearer_and_is_read_at_start() {
    let jwks = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crates/kafka-sasl/tests/fixtures/rsa2048.jwks.json"
    );
    let users = users_file();
    let base = [
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_USERS_FILE", users.path().to_str().unwrap()),
    ];
    let config = load(
        None,
        env(&[
            &base[..],
            &[
                ("IGGY_KAFKA_SASL_OAUTHBEARER_JWKS_FILE", jwks),
                (
                    "IGGY_KAFKA_SASL_OAUTHBEARER_ISSUER",
                    "https://issuer.example",
                ),
                ("IGGY_KAFKA_SASL_OAUTHBEARER_AUDIENCE", "kafka"),
                ("IGGY_KAFKA_SASL_OAUTHBEARER_PRINCIPAL_CLAIM", "email"),
                ("IGGY_KAFKA_SASL_OAUTHBEARER_CLOCK_SKEW_MS", "1000"),
            ],
        ]
        .concat()),
    )
    .unwrap();
    let sasl = config.sasl.unwrap();
    assert_eq!(
        sasl.config.mechanisms.last(),
        Some(&kafka_sasl::Mechanism::OAuthBearer)
    );
    let oauth = sasl.oauth.unwrap();
    assert!(!oauth.jwks.is_empty());
    assert!(!oauth.allow_unsecured);
    assert_eq!(oauth.issuer.as_deref(), Some("https://issuer.example"));
    assert_eq!(oauth.audience.as_deref(), Some("kafka"));
    assert_eq!(oauth.principal_claim, "email");
    assert_eq!(oauth.clock_skew, Duration::from_secs(1));
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);

    let not_jwks = toml_file("{\"keys\": 3}");
    for path in [not_jwks.path().to_str().unwrap(), "/nonexistent/jwks.json"] {
        let message = load_err(
            None,
            &[
                &base[..],
                &[("IGGY_KAFKA_SASL_OAUTHBEARER_JWKS_FILE", path)],
            ]
            .concat(),
        );
        assert!(
            message.starts_with("IGGY_KAFKA_SASL_OAUTHBEARER_JWKS_FILE="),
            "{message}"
        );
    }
}

#[test]
fn authorization_settings_reach_the_broker_and_the_acl_setup() {
    let config = load(None, env(&[])).unwrap();
    let defaults = kafka_broker::config::AuthorizationSettings::default();
    assert_eq!(config.broker.authorization, defaults);
    assert_eq!(config.acls.file, None);
    assert_eq!(
        config.acls.max_bindings,
        kafka_authz::store::DEFAULT_MAX_ACL_BINDINGS
    );
    // No listener authenticates: off unless forced.
    assert!(!config.acls.enabled);

    let acl_file = toml_file(r#"{ "bindings": [] }"#);
    let path = acl_file.path().to_str().unwrap();
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_AUTHORIZATION_ENABLED", "true"),
            ("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false"),
            ("IGGY_KAFKA_ACL_FILE", path),
            ("IGGY_KAFKA_ACL_REFRESH_INTERVAL_MS", "2500"),
            ("IGGY_KAFKA_MAX_ACL_BINDINGS", "42"),
            ("IGGY_KAFKA_MAX_ACL_FIELD_BYTES", "300"),
            ("IGGY_KAFKA_MAX_DESCRIBED_ACL_BINDINGS", "77"),
        ]),
    )
    .unwrap();
    assert_eq!(config.broker.authorization.max_acl_field_bytes, 300);
    assert_eq!(config.broker.authorization.max_described_acl_bindings, 77);
    assert_eq!(config.broker.authorization.enabled, Some(true));
    assert!(!config.broker.authorization.allow_everyone_if_no_acl_found);
    assert_eq!(
        config.broker.authorization.acl_refresh_interval,
        Duration::from_millis(2500)
    );
    assert_eq!(config.acls.file.as_deref(), Some(acl_file.path()));
    assert_eq!(config.acls.max_bindings, 42);
    assert!(config.acls.enabled);

    // The same from a file.
    let file = toml_file("authorization_enabled = false\nmax_acl_bindings = 7\n");
    let config = load(Some(file.path()), env(&[])).unwrap();
    assert_eq!(config.broker.authorization.enabled, Some(false));
    assert_eq!(config.acls.max_bindings, 7);
}

#[test]
fn authorization_follows_authenticating_listeners_and_warns_when_forced_off() {
    let users = users_file();
    let users_path = users.path().to_str().unwrap();
    let sasl = [
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_USERS_FILE", users_path),
    ];
    let config = load(None, env(&sasl)).unwrap();
    assert_eq!(config.broker.authorization.enabled, None);
    assert!(config.acls.enabled);
    assert!(
        !config
            .warnings
            .iter()
            .any(|w| w.contains("AUTHORIZATION_ENABLED")),
        "{:?}",
        config.warnings
    );

    let off = [&sasl[..], &[("IGGY_KAFKA_AUTHORIZATION_ENABLED", "false")]].concat();
    let config = load(None, env(&off)).unwrap();
    assert!(!config.acls.enabled);
    let warning = config
        .warnings
        .iter()
        .find(|w| w.contains("IGGY_KAFKA_AUTHORIZATION_ENABLED"))
        .unwrap_or_else(|| panic!("no warning: {:?}", config.warnings));
    assert!(warning.contains("authenticates"), "{warning}");
    // Off without an authenticating listener: nothing to warn about.
    let config = load(None, env(&[("IGGY_KAFKA_AUTHORIZATION_ENABLED", "false")])).unwrap();
    assert!(
        !config
            .warnings
            .iter()
            .any(|w| w.contains("AUTHORIZATION_ENABLED"))
    );
}

#[test]
fn authorization_mistakes_name_the_setting() {
    let message = load_err(None, &[("IGGY_KAFKA_MAX_ACL_BINDINGS", "0")]);
    assert!(
        message.starts_with("IGGY_KAFKA_MAX_ACL_BINDINGS=\"0\": "),
        "{message}"
    );
    let message = load_err(None, &[("IGGY_KAFKA_MAX_ACL_FIELD_BYTES", "0")]);
    assert!(
        message.starts_with("IGGY_KAFKA_MAX_ACL_FIELD_BYTES=\"0\": "),
        "{message}"
    );
    let message = load_err(None, &[("IGGY_KAFKA_MAX_DESCRIBED_ACL_BINDINGS", "0")]);
    assert!(
        message.starts_with("IGGY_KAFKA_MAX_DESCRIBED_ACL_BINDINGS=\"0\": "),
        "{message}"
    );
    let message = load_err(None, &[("IGGY_KAFKA_ACL_REFRESH_INTERVAL_MS", "0")]);
    assert!(
        message.starts_with("IGGY_KAFKA_ACL_REFRESH_INTERVAL_MS=\"0\": "),
        "{message}"
    );
    let message = load_err(None, &[("IGGY_KAFKA_AUTHORIZATION_ENABLED", "maybe")]);
    assert!(
        message.starts_with("IGGY_KAFKA_AUTHORIZATION_ENABLED=\"maybe\": "),
        "{message}"
    );
    // With the bridge, ACLs live in Iggy: a file is refused.
    let message = load_err(
        None,
        &[
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_PASSWORD", "secret"),
            ("IGGY_KAFKA_ACL_FILE", "/etc/gw/acls.json"),
        ],
    );
    assert!(
        message.starts_with("IGGY_KAFKA_ACL_FILE=\"/etc/gw/acls.json\": "),
        "{message}"
    );
    assert!(message.contains("CreateAcls"), "{message}");
}

#[test]
fn transaction_settings_are_read_and_checked() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_TRANSACTION_MAX_TIMEOUT_MS", "60000"),
            ("IGGY_KAFKA_TRANSACTION_ID_EXPIRATION_MS", "3600000"),
            ("IGGY_KAFKA_TRANSACTION_ABORT_CHECK_INTERVAL_MS", "500"),
            ("IGGY_KAFKA_TRANSACTION_MAX_PARTITIONS_PER_TXN", "7"),
            ("IGGY_KAFKA_TRANSACTION_MAX_TRANSACTIONAL_IDS", "8"),
            ("IGGY_KAFKA_TRANSACTION_MAX_OPEN_TXNS", "9"),
            ("IGGY_KAFKA_TRANSACTION_INDEX_REBUILD_MAX_BYTES", "1000"),
            ("IGGY_KAFKA_TRANSACTION_MARKER_RETRY_MIN_MS", "20"),
            ("IGGY_KAFKA_TRANSACTION_MARKER_RETRY_MAX_MS", "300"),
            ("IGGY_KAFKA_TRANSACTION_INDEX_MAX_PARTITIONS", "11"),
            ("IGGY_KAFKA_TRANSACTION_MAX_VERIFICATION_GUARDS", "12"),
            ("IGGY_KAFKA_TRANSACTION_MAX_FLAGGED_TOPICS", "13"),
            ("IGGY_KAFKA_TRANSACTION_COMPLETION_WAIT_MS", "40"),
        ]),
    )
    .unwrap();
    let t = &config.broker.transactions;
    let c = &t.coordinator;
    assert_eq!(
        (
            c.max_timeout_ms,
            c.id_expiration_ms,
            c.abort_check_interval_ms,
            c.max_partitions_per_txn,
            c.max_transactional_ids,
            c.max_open_txns,
        ),
        (60_000, 3_600_000, 500, 7, 8, 9)
    );
    assert_eq!(t.txn_index_rebuild_max_bytes, 1000);
    assert_eq!(
        (
            t.txn_index_max_partitions,
            t.txn_max_verification_guards,
            t.txn_max_flagged_topics,
        ),
        (11, 12, 13)
    );
    assert_eq!(
        (t.marker_retry_min, t.marker_retry_max),
        (Duration::from_millis(20), Duration::from_millis(300))
    );
    assert_eq!(t.completion_wait, Duration::from_millis(40));
    for (key, value) in [
        ("IGGY_KAFKA_TRANSACTION_MAX_TIMEOUT_MS", "0"),
        ("IGGY_KAFKA_TRANSACTION_MAX_OPEN_TXNS", "0"),
        ("IGGY_KAFKA_TRANSACTION_INDEX_MAX_PARTITIONS", "0"),
        ("IGGY_KAFKA_TRANSACTION_MARKER_RETRY_MIN_MS", "0"),
        ("IGGY_KAFKA_TRANSACTION_MARKER_RETRY_MAX_MS", "600001"),
        ("IGGY_KAFKA_TRANSACTION_COMPLETION_WAIT_MS", "60001"),
        ("IGGY_KAFKA_TRANSACTION_ID_EXPIRATION_MS", "3000000000"),
    ] {
        let message = load_err(None, &[(key, value)]);
        assert!(message.starts_with(&format!("{key}=")), "{message}");
    }
}

#[test]
fn inter_gateway_settings_fill_the_client_and_keep_the_password_out_of_errors() {
    let config = load(
        None,
        env(&[
            ("IGGY_KAFKA_INTER_GATEWAY_LISTENER", "INTERNAL"),
            ("IGGY_KAFKA_INTER_GATEWAY_SASL_MECHANISM", "scram-sha-512"),
            ("IGGY_KAFKA_INTER_GATEWAY_USERNAME", "gateway"),
            ("IGGY_KAFKA_INTER_GATEWAY_PASSWORD", " sp ace "),
            ("IGGY_KAFKA_INTER_GATEWAY_REQUEST_TIMEOUT_MS", "2500"),
            ("IGGY_KAFKA_INTER_GATEWAY_MAX_PENDING_CALLS", "8"),
        ]),
    )
    .unwrap();
    let c = &config.broker.inter_gateway;
    assert_eq!(c.listener, "INTERNAL");
    assert_eq!(c.sasl_mechanism.as_deref(), Some("SCRAM-SHA-512"));
    assert_eq!(c.username.as_deref(), Some("gateway"));
    assert_eq!(c.password.as_deref(), Some(" sp ace "));
    assert_eq!(c.request_timeout, Duration::from_millis(2500));
    assert_eq!(c.max_pending_calls, 8);
    assert!(!format!("{c:?}").contains("sp ace"));

    let e = load_err(
        None,
        &[
            ("IGGY_KAFKA_INTER_GATEWAY_SASL_MECHANISM", "GSSAPI"),
            ("IGGY_KAFKA_INTER_GATEWAY_USERNAME", "gateway"),
            ("IGGY_KAFKA_INTER_GATEWAY_PASSWORD", "hunter2-secret"),
        ],
    );
    assert!(e.contains("IGGY_KAFKA_INTER_GATEWAY_SASL_MECHANISM"), "{e}");
    assert!(!e.contains("hunter2-secret"), "{e}");
    let e = load_err(
        None,
        &[
            ("IGGY_KAFKA_INTER_GATEWAY_SASL_MECHANISM", "PLAIN"),
            ("IGGY_KAFKA_INTER_GATEWAY_PASSWORD", "hunter2-secret"),
        ],
    );
    assert!(e.contains("inter_gateway_username"), "{e}");
    // PLAIN in clear only when asked for.
    let plain = [
        ("IGGY_KAFKA_INTER_GATEWAY_SASL_MECHANISM", "PLAIN"),
        ("IGGY_KAFKA_INTER_GATEWAY_USERNAME", "gateway"),
        ("IGGY_KAFKA_INTER_GATEWAY_PASSWORD", "hunter2-secret"),
    ];
    let e = load_err(None, &plain);
    assert!(
        e.starts_with("IGGY_KAFKA_INTER_GATEWAY_SASL_MECHANISM") && e.contains("in clear"),
        "{e}"
    );
    assert!(!e.contains("hunter2-secret"), "{e}");
    let allowed = [
        plain.as_slice(),
        &[("IGGY_KAFKA_INTER_GATEWAY_ALLOW_PLAIN_WITHOUT_TLS", "true")],
    ]
    .concat();
    let config = load(None, env(&allowed)).unwrap();
    assert!(config.broker.inter_gateway.allow_plain_without_tls);
    assert_eq!(config.broker.inter_gateway.max_scram_iterations, 16384);
    let bounded = [
        allowed.as_slice(),
        &[
            ("IGGY_KAFKA_SASL_SCRAM_MAX_ITERATIONS", "8192"),
            ("IGGY_KAFKA_SASL_ENABLED", "true"),
            ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
            ("IGGY_KAFKA_IGGY_PASSWORD", "p"),
            (
                "IGGY_KAFKA_IGGY_META_SECRET",
                "a-meta-secret-of-at-least-32-bytes!!",
            ),
        ],
    ]
    .concat();
    let config = load(None, env(&bounded)).unwrap();
    assert_eq!(config.broker.inter_gateway.max_scram_iterations, 8192);
    assert!(!e.contains("hunter2-secret"), "{e}");
    let e = load_err(
        None,
        &[(
            "IGGY_KAFKA_INTER_GATEWAY_TLS_CA_FILE",
            "/nonexistent/ca.pem",
        )],
    );
    assert!(e.contains("IGGY_KAFKA_INTER_GATEWAY_TLS_CA_FILE"), "{e}");
    let e = load_err(
        None,
        &[("IGGY_KAFKA_INTER_GATEWAY_REQUEST_TIMEOUT_MS", "0")],
    );
    assert!(e.contains("1 to 300000"), "{e}");
}

#[test]
fn the_bridge_with_authentication_needs_a_meta_secret() {
    let on = [
        ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
        ("IGGY_KAFKA_IGGY_PASSWORD", "p"),
        ("IGGY_KAFKA_SASL_ENABLED", "true"),
        ("IGGY_KAFKA_SASL_MECHANISMS", "PLAIN"),
    ];
    let message = load_err(None, &on);
    assert!(
        message.starts_with("IGGY_KAFKA_IGGY_META_SECRET (default): is required"),
        "{message}"
    );
    let short = [
        on.as_slice(),
        &[("IGGY_KAFKA_IGGY_META_SECRET", "too-short")],
    ]
    .concat();
    let message = load_err(None, &short);
    assert!(
        message.starts_with("IGGY_KAFKA_IGGY_META_SECRET") && message.contains("32 bytes"),
        "{message}"
    );
    let secret = "a-meta-secret-of-at-least-32-bytes!!";
    let given = [
        on.as_slice(),
        &[
            ("IGGY_KAFKA_IGGY_META_SECRET", secret),
            ("IGGY_KAFKA_IGGY_META_MAX_SKEW_MS", "60000"),
            ("IGGY_KAFKA_IGGY_META_UNSIGNED_BEFORE_MS", "1700000000000"),
        ],
    ]
    .concat();
    let config = load(None, env(&given)).unwrap();
    let Backend::Iggy(bridge) = &config.backend else {
        panic!("bridge expected")
    };
    assert_eq!(bridge.meta_secret.as_deref(), Some(secret));
    assert_eq!(bridge.meta_max_skew, Duration::from_secs(60));
    assert_eq!(bridge.meta_unsigned_before_ms, Some(1_700_000_000_000));
    // Without authentication the secret is optional.
    let open = [
        ("IGGY_KAFKA_BRIDGE_ENABLED", "true"),
        ("IGGY_KAFKA_IGGY_PASSWORD", "p"),
    ];
    load(None, env(&open)).unwrap();
}
