//! Kafka record batches (placeholder, replaced by the crate implementation).
