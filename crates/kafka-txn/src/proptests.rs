//! Property tests over random request sequences.
