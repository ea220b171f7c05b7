//! How one setting's value is read, whichever layer it comes from, and how a section's keys
//! are listed.
//!
//! Environment values reach serde as raw strings and TOML values as numbers, booleans or
//! strings; [`parsed`] turns each of them into the field's type through its text and
//! [`FromStr`], so `max_connections = 100`, `max_connections = "100"` and
//! `IGGY_KAFKA_MAX_CONNECTIONS=100` are the same value and fail with the same message.

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use std::fmt::{self, Display};
use std::marker::PhantomData;
use std::str::FromStr;
use std::time::Duration;

/// Deserializes any scalar through its text and [`FromStr`], so environment strings and
/// TOML numbers or booleans land in the same typed field.
pub(super) fn parsed<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    deserializer.deserialize_any(TextVisitor {
        trim: true,
        target: PhantomData,
    })
}

/// Like [`parsed`] without trimming: for secrets, whose spaces may be meaningful.
pub(super) fn verbatim_opt<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    deserializer
        .deserialize_any(TextVisitor {
            trim: false,
            target: PhantomData,
        })
        .map(Some)
}

/// [`parsed`] for a setting that is unset by default.
pub(super) fn parsed_opt<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    parsed(deserializer).map(Some)
}

struct TextVisitor<T> {
    trim: bool,
    target: PhantomData<T>,
}

impl<T> Visitor<'_> for TextVisitor<T>
where
    T: FromStr,
    T::Err: Display,
{
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a single value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        let value = if self.trim { text.trim() } else { text };
        value
            .parse()
            .map_err(|e| E::custom(format!("{e} (expected {})", short_type_name::<T>())))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

/// `core::net::SocketAddr` -> `SocketAddr`, for "expected ..." hints.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

/// A duration as whole milliseconds, for defaults given in `_ms` settings.
pub(super) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The field names of a section struct, read from its serde derive so the list of keys
/// cannot drift from the struct.
pub(super) fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe;
    #[derive(Debug)]
    struct ProbeError(Option<&'static [&'static str]>);
    impl fmt::Display for ProbeError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for ProbeError {}
    impl de::Error for ProbeError {
        fn custom<M: Display>(_: M) -> Self {
            ProbeError(None)
        }
    }
    impl<'de> Deserializer<'de> for Probe {
        type Error = ProbeError;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
            Err(ProbeError(None))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, ProbeError> {
            Err(ProbeError(Some(fields)))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    match T::deserialize(Probe) {
        Err(ProbeError(Some(fields))) => fields,
        _ => &[],
    }
}
