//! SASL/PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, checked by a
//! [`PlainAuthenticator`](crate::PlainAuthenticator). An authorization id, when given, must
//! equal the username (Kafka's rule).
