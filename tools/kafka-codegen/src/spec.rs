//! The subset of Kafka's JSON message-spec format that the generator reads.
//!
//! A spec file is JSON with `//` line comments. Each message has a name, a type
//! (`request`, `response`, `header` or `data`), version ranges, and a tree of fields;
//! array-of-struct fields carry their struct's fields inline, and `commonStructs` holds
//! structs that several fields share. Free-text `about` entries are ignored on purpose.

use crate::CodegenError;
use serde_json::Value;

/// An inclusive version range; `none` is represented by `None` at the use site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: i16,
    pub max: i16,
}

impl Range {
    pub const ALL: Range = Range {
        min: 0,
        max: i16::MAX,
    };

    pub fn contains(&self, v: i16) -> bool {
        v >= self.min && v <= self.max
    }

    pub fn parse(s: &str) -> Result<Option<Range>, CodegenError> {
        let s = s.trim();
        let bad = || CodegenError::Spec(format!("bad version range {s:?}"));
        if s == "none" {
            return Ok(None);
        }
        if let Some(lo) = s.strip_suffix('+') {
            let min = lo.parse().map_err(|_| bad())?;
            return Ok(Some(Range { min, max: i16::MAX }));
        }
        if let Some((lo, hi)) = s.split_once('-') {
            let min = lo.parse().map_err(|_| bad())?;
            let max = hi.parse().map_err(|_| bad())?;
            return Ok(Some(Range { min, max }));
        }
        let v = s.parse().map_err(|_| bad())?;
        Ok(Some(Range { min: v, max: v }))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    Bool,
    Int8,
    Int16,
    Uint16,
    Int32,
    Uint32,
    Int64,
    Float64,
    String,
    Bytes,
    Records,
    /// `records` in a response: written from segments (`RecordSet`), so record batches
    /// kept apart are not joined to be sent.
    RecordSet,
    Uuid,
    Array(Box<Ty>),
    Struct(String),
}

impl Ty {
    fn parse(s: &str) -> Ty {
        if let Some(inner) = s.strip_prefix("[]") {
            return Ty::Array(Box::new(Ty::parse(inner)));
        }
        match s {
            "bool" => Ty::Bool,
            "int8" => Ty::Int8,
            "int16" => Ty::Int16,
            "uint16" => Ty::Uint16,
            "int32" => Ty::Int32,
            "uint32" => Ty::Uint32,
            "int64" => Ty::Int64,
            "float64" => Ty::Float64,
            "string" => Ty::String,
            "bytes" => Ty::Bytes,
            "records" => Ty::Records,
            "uuid" => Ty::Uuid,
            other => Ty::Struct(other.to_string()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub ty: Ty,
    pub versions: Option<Range>,
    pub nullable: Option<Range>,
    pub tagged: Option<Range>,
    pub tag: Option<u32>,
    pub default: Option<String>,
    pub ignorable: bool,
    /// `flexibleVersions` on a field overrides the message's (the request header's
    /// client id stays a classic string in flexible headers).
    pub flexible_override: Option<Option<Range>>,
    /// Inline struct fields, for `[]Struct` and `Struct` types declared in place.
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone)]
pub struct StructDef {
    pub name: String,
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub kind: String,
    pub api_key: Option<i16>,
    pub valid: Range,
    pub flexible: Option<Range>,
    pub fields: Vec<Field>,
    pub common_structs: Vec<StructDef>,
}

/// Drops `//` comments (whole-line and trailing) outside string literals.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if in_str {
                if escaped {
                    escaped = false;
                } else if c == b'\\' {
                    escaped = true;
                } else if c == b'"' {
                    in_str = false;
                }
            } else if c == b'"' {
                in_str = true;
            } else if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
            i += 1;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn parse_field(v: &Value) -> Result<Field, CodegenError> {
    let name = str_of(v, "name")
        .ok_or_else(|| CodegenError::Spec("field without name".into()))?
        .to_string();
    let ty = Ty::parse(
        str_of(v, "type")
            .ok_or_else(|| CodegenError::Spec(format!("field {name} without type")))?,
    );
    let versions = match str_of(v, "versions") {
        Some(s) => Range::parse(s)?,
        None => None,
    };
    let nullable = match str_of(v, "nullableVersions") {
        Some(s) => Range::parse(s)?,
        None => None,
    };
    let tagged = match str_of(v, "taggedVersions") {
        Some(s) => Range::parse(s)?,
        None => None,
    };
    let tag = v.get("tag").and_then(Value::as_u64).map(|t| t as u32);
    let default = match v.get("default") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let ignorable = v.get("ignorable").and_then(Value::as_bool).unwrap_or(false);
    let flexible_override = match str_of(v, "flexibleVersions") {
        Some(s) => Some(Range::parse(s)?),
        None => None,
    };
    let fields = match v.get("fields").and_then(Value::as_array) {
        Some(a) => a.iter().map(parse_field).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok(Field {
        name,
        ty,
        versions,
        nullable,
        tagged,
        tag,
        default,
        ignorable,
        flexible_override,
        fields,
    })
}

/// A response's `records` fields become [`Ty::RecordSet`].
fn segmented_records(fields: &mut [Field]) {
    for f in fields {
        if f.ty == Ty::Records {
            f.ty = Ty::RecordSet;
        }
        segmented_records(&mut f.fields);
    }
}

pub fn parse_spec(src: &str) -> Result<Spec, CodegenError> {
    let v: Value = serde_json::from_str(&strip_comments(src))
        .map_err(|e| CodegenError::Spec(format!("invalid JSON: {e}")))?;
    let name = str_of(&v, "name")
        .ok_or_else(|| CodegenError::Spec("spec without name".into()))?
        .to_string();
    let kind = str_of(&v, "type").unwrap_or("data").to_string();
    let api_key = v.get("apiKey").and_then(Value::as_i64).map(|k| k as i16);
    let valid = Range::parse(str_of(&v, "validVersions").unwrap_or("0"))?
        .ok_or_else(|| CodegenError::Spec(format!("{name}: empty validVersions")))?;
    let flexible = Range::parse(str_of(&v, "flexibleVersions").unwrap_or("none"))?;
    let fields = match v.get("fields").and_then(Value::as_array) {
        Some(a) => a.iter().map(parse_field).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let mut common_structs = Vec::new();
    if let Some(a) = v.get("commonStructs").and_then(Value::as_array) {
        for s in a {
            let sname = str_of(s, "name")
                .ok_or_else(|| CodegenError::Spec(format!("{name}: common struct without name")))?;
            let fields = match s.get("fields").and_then(Value::as_array) {
                Some(a) => a.iter().map(parse_field).collect::<Result<_, _>>()?,
                None => Vec::new(),
            };
            common_structs.push(StructDef {
                name: sname.to_string(),
                fields,
            });
        }
    }
    let (mut fields, mut common_structs) = (fields, common_structs);
    if kind == "response" {
        segmented_records(&mut fields);
        for s in &mut common_structs {
            segmented_records(&mut s.fields);
        }
    }
    Ok(Spec {
        name,
        kind,
        api_key,
        valid,
        flexible,
        fields,
        common_structs,
    })
}
