//! Storage behaviour suite (in progress).
