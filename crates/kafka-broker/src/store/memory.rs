//! The embedded in-memory store (implementation in progress).
