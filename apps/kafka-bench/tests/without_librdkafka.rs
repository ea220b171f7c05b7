//! Without the `librdkafka` feature the load commands are not built, so the smoke test
//! (`tests/smoke.rs`) is not either; this says so in the test output instead of passing
//! silently. The test command (`scripts/test.sh`) builds and runs it with the feature.

#[cfg(not(feature = "librdkafka"))]
#[test]
fn smoke_test_needs_the_librdkafka_feature() {
    eprintln!(
        "SKIPPED: kafka-bench smoke test (built without --features librdkafka; \
         scripts/test.sh runs it)"
    );
}
