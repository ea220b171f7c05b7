//! Renders parsed specs as Rust source.
//!
//! Every struct gets: the struct itself, `Default` (spec defaults), `Decode`, `Encode`,
//! `min_len(v)` (the exact fewest bytes one instance occupies at version `v`: the sum of
//! its fixed fields' smallest encodings, nested structs included, plus the tagged-section
//! count in flexible versions), `lists(v, f)` (every list type an instance can hold at
//! `v`, with its element's in-memory size and minimum wire size, for the decode memory
//! bound), and under `cfg(test)` a generator of random, version-valid values for the
//! round-trip property tests.
//!
//! Array decoders refuse a count larger than the bytes left divided by the element's
//! `min_len` at the message's version, before allocating; a minimum taken over all
//! versions would be too small (a struct whose fields all start at a later version has
//! a minimum of 0 at the earlier ones) and would let a forged count allocate far more
//! than the frame could ever fill.

use crate::CodegenError;
use crate::config::MessageConfig;
use crate::spec::{Field, Range, Spec, StructDef, Ty};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

const RUST_KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

pub fn snake(name: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn field_ident(name: &str) -> String {
    let s = snake(name);
    if RUST_KEYWORDS.contains(&s.as_str()) {
        format!("{s}_")
    } else {
        s
    }
}

/// Context of the message being rendered.
struct Msg<'a> {
    cfg: &'a MessageConfig,
    spec: &'a Spec,
    structs: BTreeMap<String, StructDef>,
    /// Min encoded length per struct and version, computed lazily.
    min_len: BTreeMap<(String, i16), usize>,
}

fn intersect(a: Range, b: Range) -> Option<Range> {
    let min = a.min.max(b.min);
    let max = a.max.min(b.max);
    (min <= max).then_some(Range { min, max })
}

impl Msg<'_> {
    fn range(&self) -> Range {
        Range {
            min: self.cfg.min,
            max: self.cfg.max,
        }
    }

    fn any_flexible(&self) -> bool {
        self.spec
            .flexible
            .is_some_and(|f| intersect(f, self.range()).is_some())
    }

    fn is_flexible(&self, v: i16) -> bool {
        self.spec.flexible.is_some_and(|f| f.contains(v))
    }

    /// A boolean Rust expression over `v` for "v is in r", simplified against the
    /// message's generated range.
    fn cond(&self, r: Option<Range>) -> String {
        let whole = self.range();
        let Some(r) = r else { return "false".into() };
        let Some(r) = intersect(r, whole) else {
            return "false".into();
        };
        let lo = r.min > whole.min;
        let hi = r.max < whole.max;
        match (lo, hi) {
            (false, false) => "true".into(),
            (true, false) => format!("v >= {}", r.min),
            (false, true) => format!("v <= {}", r.max),
            (true, true) if r.min == r.max => format!("v == {}", r.min),
            (true, true) => format!("(v >= {} && v <= {})", r.min, r.max),
        }
    }

    fn flexible_expr(&self) -> String {
        self.cond(self.spec.flexible)
    }

    /// Whether the field uses compact encodings: flexible, unless the field opts out.
    fn compact_expr(&self, f: &Field) -> String {
        match f.flexible_override {
            Some(r) => self.cond(r),
            None => "flexible".into(),
        }
    }

    fn field_present(&self, f: &Field) -> Option<Range> {
        f.versions.and_then(|r| intersect(r, self.range()))
    }

    /// Versions in which the field sits in the fixed (non-tagged) part.
    fn fixed_cond(&self, f: &Field) -> String {
        match (f.versions, f.tagged) {
            (Some(v), None) => self.cond(Some(v)),
            (Some(v), Some(t)) => {
                // Fixed where present and not tagged; specs only tag whole ranges, so a
                // field is either always tagged or tagged from some version on.
                if t.min <= v.min {
                    "false".into()
                } else {
                    self.cond(Some(Range {
                        min: v.min,
                        max: v.max.min(t.min - 1),
                    }))
                }
            }
            (None, _) => "false".into(),
        }
    }

    fn tagged_cond(&self, f: &Field) -> String {
        match (f.versions, f.tagged) {
            (Some(v), Some(t)) => self.cond(intersect(v, t)),
            _ => "false".into(),
        }
    }

    /// The fewest bytes one instance of struct `name` occupies at version `v`.
    fn struct_min_len(&mut self, name: &str, v: i16) -> usize {
        if let Some(&n) = self.min_len.get(&(name.to_string(), v)) {
            return n;
        }
        let fields = if name == self.spec.name {
            self.spec.fields.clone()
        } else if let Some(def) = self.structs.get(name) {
            def.fields.clone()
        } else {
            return 1;
        };
        let flexible = self.is_flexible(v);
        // The tagged section's count, even when empty.
        let mut n = usize::from(flexible);
        for f in &fields {
            let present = f.versions.is_some_and(|r| r.contains(v));
            let tagged = f.tagged.is_some_and(|r| r.contains(v));
            if !present || tagged {
                continue;
            }
            let compact = match f.flexible_override {
                Some(r) => r.is_some_and(|r| r.contains(v)),
                None => flexible,
            };
            n += self.field_min_len(f, compact, v);
        }
        self.min_len.insert((name.to_string(), v), n);
        n
    }

    /// The fewest bytes field `f` occupies in the fixed part at version `v`.
    fn field_min_len(&mut self, f: &Field, compact: bool, v: i16) -> usize {
        match &f.ty {
            // A struct that is nullable at some version always has its marker byte;
            // the struct itself follows unless the version lets it be null.
            Ty::Struct(name) if f.nullable.is_some() => {
                if f.nullable.is_some_and(|r| r.contains(v)) {
                    1
                } else {
                    1 + self.struct_min_len(name, v)
                }
            }
            Ty::Struct(name) => self.struct_min_len(name, v),
            other => prim_min_len(other, compact),
        }
    }
}

/// The fewest bytes a value of a non-struct type takes: its width, or its length or count
/// prefix when empty or null.
fn prim_min_len(ty: &Ty, compact: bool) -> usize {
    match ty {
        Ty::Bool | Ty::Int8 => 1,
        Ty::Int16 | Ty::Uint16 => 2,
        Ty::Int32 | Ty::Uint32 => 4,
        Ty::Int64 | Ty::Float64 => 8,
        Ty::Uuid => 16,
        Ty::String => {
            if compact {
                1
            } else {
                2
            }
        }
        Ty::Bytes | Ty::Records | Ty::RecordSet | Ty::Array(_) | Ty::Struct(_) => {
            if compact {
                1
            } else {
                4
            }
        }
    }
}

/// An expression for the minimum wire size of a list element of non-struct type `ty`,
/// given the Rust expression `compact`.
fn prim_min_expr(ty: &Ty, compact: &str) -> String {
    let (c, n) = (prim_min_len(ty, true), prim_min_len(ty, false));
    match compact {
        "true" => c.to_string(),
        "false" => n.to_string(),
        _ if c == n => c.to_string(),
        _ => format!("(if {compact} {{ {c} }} else {{ {n} }})"),
    }
}

/// Statements calling `f(size, min)` for the lists a field of type `ty` holds (directly,
/// or inside its structs), `compact` being the field's encoding flag expression.
fn lists_stmt(ty: &Ty, compact: &str) -> String {
    match ty {
        Ty::Array(elem) => match elem.as_ref() {
            Ty::Struct(s) => {
                format!("f(std::mem::size_of::<{s}>(), {s}::min_len(v).max(1)); {s}::lists(v, f);")
            }
            other => {
                let inner = lists_stmt(other, compact);
                format!(
                    "f(std::mem::size_of::<{}>(), {}); {inner}",
                    base_ty(other),
                    prim_min_expr(other, compact)
                )
            }
        },
        Ty::Struct(s) => format!("{s}::lists(v, f);"),
        _ => String::new(),
    }
}

fn collect_structs(fields: &[Field], out: &mut BTreeMap<String, StructDef>) {
    for f in fields {
        let inner = match &f.ty {
            Ty::Array(t) => match t.as_ref() {
                Ty::Struct(n) => Some(n),
                _ => None,
            },
            Ty::Struct(n) => Some(n),
            _ => None,
        };
        if let Some(n) = inner
            && !f.fields.is_empty()
        {
            out.insert(
                n.clone(),
                StructDef {
                    name: n.clone(),
                    fields: f.fields.clone(),
                },
            );
            collect_structs(&f.fields, out);
        }
    }
}

fn base_ty(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "bool".into(),
        Ty::Int8 => "i8".into(),
        Ty::Int16 => "i16".into(),
        Ty::Uint16 => "u16".into(),
        Ty::Int32 => "i32".into(),
        Ty::Uint32 => "u32".into(),
        Ty::Int64 => "i64".into(),
        Ty::Float64 => "f64".into(),
        Ty::String => "ByteString".into(),
        Ty::Bytes | Ty::Records => "Bytes".into(),
        Ty::RecordSet => "RecordSet".into(),
        Ty::Uuid => "Uuid".into(),
        Ty::Array(t) => format!("Vec<{}>", base_ty(t)),
        Ty::Struct(n) => n.clone(),
    }
}

fn rust_ty(f: &Field) -> String {
    if f.nullable.is_some() {
        format!("Option<{}>", base_ty(&f.ty))
    } else {
        base_ty(&f.ty)
    }
}

fn parse_int_default(d: &str) -> Result<i128, CodegenError> {
    let d = d.trim();
    let parsed = if let Some(h) = d.strip_prefix("0x").or_else(|| d.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()
    } else {
        d.parse().ok()
    };
    parsed.ok_or_else(|| CodegenError::Spec(format!("bad integer default {d:?}")))
}

fn base_default(ty: &Ty, d: Option<&str>) -> Result<String, CodegenError> {
    let int = |suffix: &str| -> Result<String, CodegenError> {
        match d {
            Some(d) if !d.is_empty() => Ok(format!("{}{suffix}", parse_int_default(d)?)),
            _ => Ok(format!("0{suffix}")),
        }
    };
    Ok(match ty {
        Ty::Bool => match d {
            Some("true") => "true".into(),
            _ => "false".into(),
        },
        Ty::Int8 => int("i8")?,
        Ty::Int16 => int("i16")?,
        Ty::Uint16 => int("u16")?,
        Ty::Int32 => int("i32")?,
        Ty::Uint32 => int("u32")?,
        Ty::Int64 => int("i64")?,
        Ty::Float64 => match d {
            Some(d) if !d.is_empty() => {
                let x: f64 = d
                    .parse()
                    .map_err(|_| CodegenError::Spec(format!("bad float default {d:?}")))?;
                format!("{x:?}f64")
            }
            _ => "0.0f64".into(),
        },
        Ty::String => match d {
            Some(s) if !s.is_empty() => format!("ByteString::from_static({s:?})"),
            _ => "ByteString::new()".into(),
        },
        Ty::Bytes | Ty::Records => "Bytes::new()".into(),
        Ty::RecordSet => "RecordSet::new()".into(),
        Ty::Uuid => "Uuid::ZERO".into(),
        Ty::Array(_) => "Vec::new()".into(),
        Ty::Struct(n) => format!("{n}::default()"),
    })
}

/// A boolean expression: whether the place `x` holds the field's default.
fn is_default_expr(f: &Field, x: &str) -> Result<String, CodegenError> {
    let d = default_expr(f)?;
    Ok(match (&f.ty, d.as_str()) {
        (_, "None") => format!("{x}.is_none()"),
        (Ty::Array(_), _) if f.nullable.is_some() => {
            format!("{x}.as_ref().is_some_and(|a| a.is_empty())")
        }
        (Ty::Array(_), _) => format!("{x}.is_empty()"),
        _ => format!("{x} == {d}"),
    })
}

fn default_expr(f: &Field) -> Result<String, CodegenError> {
    let d = f.default.as_deref();
    if f.nullable.is_some() {
        if d == Some("null") || matches!(f.ty, Ty::Records | Ty::RecordSet) {
            return Ok("None".into());
        }
        return Ok(format!("Some({})", base_default(&f.ty, d)?));
    }
    base_default(&f.ty, d)
}

/// The statement storing a decoded `expr` into field `field` of `this`, which holds its
/// default. Values that own memory go through `rd::set`, which skips dropping that default.
fn store_stmt(ty: &Ty, field: &str, expr: &str) -> String {
    if fixed_width(ty).is_some() {
        format!("this.{field} = {expr}?;")
    } else {
        format!("rd::set(&mut this.{field}, {expr}?);")
    }
}

/// Encoded size of a fixed-width type.
fn fixed_width(ty: &Ty) -> Option<usize> {
    match ty {
        Ty::Bool | Ty::Int8 => Some(1),
        Ty::Int16 | Ty::Uint16 => Some(2),
        Ty::Int32 | Ty::Uint32 => Some(4),
        Ty::Int64 | Ty::Float64 => Some(8),
        Ty::Uuid => Some(16),
        _ => None,
    }
}

/// Decode expression over the cursor `i: &mut &[u8]` yielding `Res<T>` (see `wire::rd`).
fn decode_expr(ty: &Ty, nullable: Option<&str>, compact: &str, path: &str) -> String {
    let p = format!("{path:?}");
    match (ty, nullable) {
        (Ty::Bool, _) => format!("rd::bool(i, {p})"),
        (Ty::Int8, _) => format!("rd::i8(i, {p})"),
        (Ty::Int16, _) => format!("rd::i16(i, {p})"),
        (Ty::Uint16, _) => format!("rd::u16(i, {p})"),
        (Ty::Int32, _) => format!("rd::i32(i, {p})"),
        (Ty::Uint32, _) => format!("rd::u32(i, {p})"),
        (Ty::Int64, _) => format!("rd::i64(i, {p})"),
        (Ty::Float64, _) => format!("rd::f64(i, {p})"),
        (Ty::Uuid, _) => format!("rd::uuid(i, {p})"),
        (Ty::String, None) => format!("rd::string(i, cx, {compact}, {p})"),
        (Ty::String, Some(n)) => format!("rd::nullable_string(i, cx, {compact}, {n}, {p})"),
        (Ty::Bytes | Ty::Records, None) => format!("rd::bytes(i, cx, {compact}, {p})"),
        (Ty::Bytes | Ty::Records, Some(n)) => {
            format!("rd::nullable_bytes(i, cx, {compact}, {n}, {p})")
        }
        (Ty::RecordSet, None) => {
            format!("rd::bytes(i, cx, {compact}, {p}).map(RecordSet::from)")
        }
        (Ty::RecordSet, Some(n)) => format!(
            "rd::nullable_bytes(i, cx, {compact}, {n}, {p}).map(|b| b.map(RecordSet::from))"
        ),
        (Ty::Array(elem), n) => {
            // The element's exact minimum at the message's version.
            let min = match elem.as_ref() {
                Ty::Struct(s) => format!("{s}::min_len(v)"),
                other => prim_min_expr(other, compact),
            };
            if let Ty::Struct(s) = elem.as_ref() {
                // Elements are decoded in place in the vector, not moved into it.
                let inner = format!("|this: &mut {s}, i| this.read_into(i, cx, v)");
                return match n {
                    None => format!("rd::struct_array(i, cx, {compact}, {min}, {p}, {inner})"),
                    Some(n) => format!(
                        "rd::nullable_struct_array(i, cx, {compact}, {n}, {min}, {p}, {inner})"
                    ),
                };
            }
            let inner = decode_expr(elem, None, compact, path);
            match n {
                None => format!("rd::array(i, cx, {compact}, {min}, {p}, |i| {inner})"),
                Some(n) => {
                    format!("rd::nullable_array(i, cx, {compact}, {n}, {min}, {p}, |i| {inner})")
                }
            }
        }
        (Ty::Struct(s), None) => format!("{s}::read(i, cx, v)"),
        (Ty::Struct(s), Some(n)) => {
            format!("rd::nullable_struct(i, {n}, {p}, |i| {s}::read(i, cx, v))")
        }
    }
}

/// Encode statements for the place expression `x` (a field, or `(*it)` in a loop).
fn encode_stmt(ty: &Ty, nullable: Option<&str>, compact: &str, path: &str, x: &str) -> String {
    let p = format!("{path:?}");
    match (ty, nullable) {
        (Ty::Bool, _) => format!("e.put_bool({x});"),
        (Ty::Int8, _) => format!("e.put_i8({x});"),
        (Ty::Int16, _) => format!("e.put_i16({x});"),
        (Ty::Uint16, _) => format!("e.put_u16({x});"),
        (Ty::Int32, _) => format!("e.put_i32({x});"),
        (Ty::Uint32, _) => format!("e.put_u32({x});"),
        (Ty::Int64, _) => format!("e.put_i64({x});"),
        (Ty::Float64, _) => format!("e.put_f64({x});"),
        (Ty::Uuid, _) => format!("e.put_uuid(&{x});"),
        (Ty::String, None) => format!("e.put_string(&{x}, {compact}, {p})?;"),
        (Ty::String, Some(n)) => {
            format!("e.put_nullable_string({x}.as_deref(), {compact}, {n}, {p})?;")
        }
        (Ty::Bytes | Ty::Records, None) => format!("e.put_bytes(&{x}, {compact}, {p})?;"),
        (Ty::Bytes | Ty::Records, Some(n)) => {
            format!("e.put_nullable_bytes({x}.as_ref(), {compact}, {n}, {p})?;")
        }
        (Ty::RecordSet, None) => format!("e.put_record_set(&{x}, {compact}, {p})?;"),
        (Ty::RecordSet, Some(n)) => {
            format!("e.put_nullable_record_set({x}.as_ref(), {compact}, {n}, {p})?;")
        }
        (Ty::Array(elem), n) => {
            let inner = encode_stmt(elem, None, compact, path, "(*it)");
            match n {
                None => format!(
                    "e.put_array_len({x}.len(), {compact}, {p})?; for it in {x}.iter() {{ {inner} }}"
                ),
                Some(n) => format!(
                    "match &{x} {{ Some(a) => {{ e.put_array_len(a.len(), {compact}, {p})?; for it in a.iter() {{ {inner} }} }} None => e.put_null_array({compact}, {n}, {p})?, }}"
                ),
            }
        }
        (Ty::Struct(_), None) => format!("{x}.encode(e, v)?;"),
        (Ty::Struct(_), Some(n)) => format!(
            "match &{x} {{ Some(s) => {{ e.put_i8(1); s.encode(e, v)?; }} None => e.put_null_struct({n}, {p})?, }}"
        ),
    }
}

fn arb_expr(ty: &Ty, nullable: Option<&str>) -> String {
    let base = match ty {
        Ty::Bool => "g.bool()".to_string(),
        Ty::Int8 => "g.next() as i8".into(),
        Ty::Int16 => "g.next() as i16".into(),
        Ty::Uint16 => "g.next() as u16".into(),
        Ty::Int32 => "g.next() as i32".into(),
        Ty::Uint32 => "g.next() as u32".into(),
        Ty::Int64 => "g.next() as i64".into(),
        Ty::Float64 => "g.f64()".into(),
        Ty::Uuid => "g.uuid()".into(),
        Ty::String => "g.string()".into(),
        Ty::Bytes | Ty::Records => "g.bytes()".into(),
        Ty::RecordSet => "g.record_set()".into(),
        Ty::Array(elem) => format!("g.vec(|g| {})", arb_expr(elem, None)),
        Ty::Struct(s) => format!("{s}::arbitrary(g, v)"),
    };
    match nullable {
        None => base,
        Some(n) => format!("if {n} && g.bool() {{ None }} else {{ Some({base}) }}"),
    }
}

fn nullable_arg(msg: &Msg<'_>, f: &Field) -> Option<String> {
    f.nullable.map(|r| msg.cond(Some(r)))
}

/// Whether the field is an error code: `int16` named `ErrorCode` or `...ErrorCode`.
fn is_error_code(f: &Field) -> bool {
    f.ty == Ty::Int16 && f.name.ends_with("ErrorCode")
}

/// The struct a field holds, directly or as array elements (at any depth).
fn inner_struct(ty: &Ty) -> Option<&str> {
    match ty {
        Ty::Struct(n) => Some(n),
        Ty::Array(t) => inner_struct(t),
        _ => None,
    }
}

impl Msg<'_> {
    /// Whether the struct holds an error code at some generated version, itself or in a
    /// nested struct.
    fn has_error_codes(&self, name: &str, depth: usize) -> bool {
        if depth > 32 {
            return false;
        }
        let Some(def) = self.structs.get(name) else {
            return false;
        };
        def.fields
            .iter()
            .filter(|f| self.field_present(f).is_some())
            .any(|f| self.field_has_error_codes(f, depth))
    }

    fn field_has_error_codes(&self, f: &Field, depth: usize) -> bool {
        is_error_code(f) || inner_struct(&f.ty).is_some_and(|n| self.has_error_codes(n, depth + 1))
    }
}

/// Statements visiting every error code under the place `x` of type `ty`.
fn error_code_visit(ty: &Ty, x: &str, depth: usize) -> String {
    match ty {
        Ty::Struct(_) => format!("{x}.for_each_error_code(version, f);"),
        Ty::Array(elem) => {
            let it = format!("it{depth}");
            let inner = error_code_visit(elem, &it, depth + 1);
            format!("for {it} in {x}.iter() {{ {inner} }}")
        }
        _ => String::new(),
    }
}

/// `for_each_error_code` for one struct of a response: calls `f` with every error code
/// field present at `version`, zeros included, descending into the nested structs and
/// arrays of structs that the version carries.
fn render_error_codes(msg: &Msg<'_>, name: &str, live: &[&Field], out: &mut String) {
    let mut body = Vec::new();
    for fld in live {
        if !msg.field_has_error_codes(fld, 0) {
            continue;
        }
        let id = field_ident(&fld.name);
        let stmt = if is_error_code(fld) {
            format!("f(self.{id});")
        } else if fld.nullable.is_some() {
            let inner = error_code_visit(&fld.ty, "x", 0);
            format!("if let Some(x) = &self.{id} {{ {inner} }}")
        } else {
            error_code_visit(&fld.ty, &format!("self.{id}"), 0)
        };
        let present = msg.cond(fld.versions);
        if present == "true" {
            body.push(stmt);
        } else {
            body.push(format!("if {present} {{ {stmt} }}"));
        }
    }
    let doc = if body.is_empty() {
        "    /// Holds no error code at any version: `f` is never called.\n"
    } else {
        "    /// Calls `f` with the value of every error code field present at `version`, zeros\n    /// included, in declaration order, descending into the nested structs and arrays the\n    /// version carries.\n"
    };
    let _ = write!(
        out,
        "impl {name} {{\n{doc}    pub fn for_each_error_code(&self, version: i16, f: &mut impl FnMut(i16)) {{\n"
    );
    if body
        .iter()
        .any(|b| b.starts_with("if v") || b.starts_with("if (v"))
    {
        out.push_str("        let v = version;\n");
    }
    for b in &body {
        let _ = writeln!(out, "        {b}");
    }
    out.push_str("    }\n}\n\n");
}

/// `min_len(v)` and `lists(v, f)` for one struct.
fn render_sizes(
    msg: &Msg<'_>,
    name: &str,
    live: &[&Field],
    min_lens: &[(i16, usize)],
    out: &mut String,
) {
    // One match arm per run of versions with the same minimum; outside the generated
    // range (never decoded) the smallest of them, a safe lower bound.
    let mut arms = String::new();
    let mut k = 0;
    while k < min_lens.len() {
        let (lo, n) = min_lens[k];
        let mut j = k;
        while j + 1 < min_lens.len() && min_lens[j + 1].1 == n {
            j += 1;
        }
        let hi = min_lens[j].0;
        if lo == hi {
            let _ = writeln!(arms, "            {lo} => {n},");
        } else {
            let _ = writeln!(arms, "            {lo}..={hi} => {n},");
        }
        k = j + 1;
    }
    let floor = min_lens.iter().map(|m| m.1).min().unwrap_or(0);
    let _ = write!(
        out,
        "impl {name} {{\n    /// The fewest bytes one encoded instance occupies at version `v`: fixed fields at\n    /// their smallest (empty strings, arrays and bytes; null where allowed), nested\n    /// structs included, and the tagged-section count when flexible.\n    pub const fn min_len(v: i16) -> usize {{\n        match v {{\n{arms}            _ => {floor},\n        }}\n    }}\n\n"
    );
    let _ = write!(
        out,
        "    /// Calls `f(size, min)` for every list an instance can hold at version `v`, nested\n    /// ones included: `size` is one element's in-memory size, `min` the fewest wire\n    /// bytes it takes. Used for the decode memory bound.\n    pub fn lists(v: i16, f: &mut dyn FnMut(usize, usize)) {{\n        let _ = &f;\n"
    );
    if msg.any_flexible() {
        let _ = writeln!(out, "        let flexible = {};", msg.flexible_expr());
    }
    for fld in live {
        let fixed = msg.fixed_cond(fld);
        if fixed != "false" {
            let compact = if msg.any_flexible() {
                msg.compact_expr(fld)
            } else {
                "false".into()
            };
            let stmt = lists_stmt(&fld.ty, &compact);
            if !stmt.is_empty() {
                if fixed == "true" {
                    let _ = writeln!(out, "        {stmt}");
                } else {
                    let _ = writeln!(out, "        if {fixed} {{ {stmt} }}");
                }
            }
        }
        let tagged = msg.tagged_cond(fld);
        if tagged != "false" {
            let stmt = lists_stmt(&fld.ty, "true");
            if !stmt.is_empty() {
                let _ = writeln!(out, "        if {tagged} {{ {stmt} }}");
            }
        }
    }
    if msg.any_flexible() {
        out.push_str("        // Unknown tagged fields: a tag and a size byte at least.\n        if flexible { f(std::mem::size_of::<RawTaggedField>(), 2); }\n");
    }
    out.push_str("    }\n}\n\n");
}

fn render_struct(
    msg: &mut Msg<'_>,
    name: &str,
    fields: &[Field],
    top: bool,
    out: &mut String,
) -> Result<(), CodegenError> {
    let flexible_any = msg.any_flexible();
    let min_lens: Vec<(i16, usize)> = (msg.cfg.min..=msg.cfg.max)
        .map(|v| (v, msg.struct_min_len(name, v)))
        .collect();

    // Struct definition.
    if top {
        let _ = writeln!(
            out,
            "/// `{name}`, versions {}-{}.",
            msg.cfg.min, msg.cfg.max
        );
    } else {
        let _ = writeln!(out, "/// `{name}`, part of `{}`.", msg.spec.name);
    }
    out.push_str("#[derive(Debug, Clone, PartialEq)]\npub struct ");
    out.push_str(name);
    out.push_str(" {\n");
    let mut live: Vec<&Field> = Vec::new();
    for f in fields {
        if msg.field_present(f).is_none() {
            continue;
        }
        live.push(f);
        let vr = f.versions.unwrap_or(Range::ALL);
        let range = if vr.max == i16::MAX {
            format!("{}+", vr.min)
        } else {
            format!("{}-{}", vr.min, vr.max)
        };
        let mut doc = format!("Versions {range}");
        if let Some(t) = f.tagged {
            let _ = write!(doc, ", tagged (tag {}) from {}", f.tag.unwrap_or(0), t.min);
        }
        if let Some(n) = f.nullable {
            let _ = write!(doc, ", nullable from {}", n.min);
        }
        let _ = writeln!(out, "    /// `{}`: {doc}.", f.name);
        let _ = writeln!(out, "    pub {}: {},", field_ident(&f.name), rust_ty(f));
    }
    if flexible_any {
        out.push_str("    /// Tagged fields this version does not know, kept as raw bytes.\n");
        out.push_str("    pub unknown_tagged_fields: Vec<RawTaggedField>,\n");
    }
    out.push_str("}\n\n");

    // Default.
    let _ = writeln!(
        out,
        "impl Default for {name} {{\n    fn default() -> Self {{\n        Self {{"
    );
    for f in &live {
        let _ = writeln!(
            out,
            "            {}: {},",
            field_ident(&f.name),
            default_expr(f)?
        );
    }
    if flexible_any {
        out.push_str("            unknown_tagged_fields: Vec::new(),\n");
    }
    out.push_str("        }\n    }\n}\n\n");

    render_sizes(msg, name, &live, &min_lens, out);

    // Decode: a cursor reader that fills the struct in place, and the `nom`-shaped
    // `Decode` impl over it.
    let _ = writeln!(
        out,
        "impl Decode for {name} {{\n    fn decode<'a>(i: &'a [u8], cx: &Cx<'_>, v: i16) -> R<'a, Self> {{\n        de::run(i, |i| Self::read(i, cx, v))\n    }}\n}}\n"
    );
    let _ = writeln!(
        out,
        "impl {name} {{\n    /// Decodes one value at `v` from the cursor `i`, advancing it.\n    pub(crate) fn read(i: &mut &[u8], cx: &Cx<'_>, v: i16) -> Res<Self> {{\n        let mut this = Self::default();\n        this.read_into(i, cx, v)?;\n        Ok(this)\n    }}\n"
    );
    let _ = writeln!(
        out,
        "    /// Like `read`, into `self`, which must hold `Self::default()`: fields absent at\n    /// `v` are left as they are.\n    pub(crate) fn read_into(&mut self, i: &mut &[u8], cx: &Cx<'_>, v: i16) -> Res<()> {{"
    );
    let _ = writeln!(
        out,
        "        let _ = cx;\n        let this = self;\n        #[cfg(debug_assertions)]\n        let start = i.len();"
    );
    if flexible_any {
        let _ = writeln!(out, "        let flexible = {};", msg.flexible_expr());
    }
    // (statement, width if fixed, presence condition) per field read in order.
    let mut reads: Vec<(String, Option<usize>, String)> = Vec::new();
    for f in &live {
        let cond = msg.fixed_cond(f);
        if cond == "false" {
            continue;
        }
        let path = format!("{name}.{}", field_ident(&f.name));
        let compact = if flexible_any {
            msg.compact_expr(f)
        } else {
            "false".into()
        };
        let n = nullable_arg(msg, f);
        let expr = decode_expr(&f.ty, n.as_deref(), &compact, &path);
        let stmt = store_stmt(&f.ty, &field_ident(&f.name), &expr);
        let stmt = if cond == "true" {
            stmt
        } else {
            format!("if {cond} {{ {stmt} }}")
        };
        reads.push((stmt, fixed_width(&f.ty), cond));
    }
    let mut k = 0;
    while k < reads.len() {
        let run = reads[k..].iter().take_while(|r| r.1.is_some()).count();
        if run < 2 {
            let _ = writeln!(out, "        {}", reads[k].0);
            k += 1;
            continue;
        }
        // A run of fixed-width fields: when the input holds all of them, they are read
        // from a local copy of the cursor (kept in registers) and the cursor is advanced
        // once; otherwise field by field, for the exact error.
        let group = &reads[k..k + run];
        let need: Vec<String> = group
            .iter()
            .map(|(_, w, cond)| {
                let w = w.unwrap_or(0);
                if cond == "true" {
                    w.to_string()
                } else {
                    format!("(if {cond} {{ {w} }} else {{ 0 }})")
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "        if i.len() >= {} {{\n            let mut fast: &[u8] = i;\n            {{\n                let i = &mut fast;",
            need.join(" + ")
        );
        for (stmt, _, _) in group {
            let _ = writeln!(out, "                {stmt}");
        }
        out.push_str("            }\n            *i = fast;\n        } else {\n");
        for (stmt, _, _) in group {
            let _ = writeln!(out, "            {stmt}");
        }
        out.push_str("        }\n");
        k += run;
    }
    if flexible_any {
        out.push_str("        if flexible {\n");
        let _ = writeln!(
            out,
            "            let n = rd::tag_section(i, cx, {:?})?;",
            format!("{name}._tagged")
        );
        out.push_str("            let mut last = None;\n            for k in 0..n {\n");
        let _ = writeln!(
            out,
            "                let (tag, data) = rd::next_tagged_field(i, cx, {:?})?;\n                rd::tag_order(&mut last, tag, {:?})?;",
            format!("{name}._tagged"),
            format!("{name}._tagged")
        );
        out.push_str("                match tag {\n");
        for f in &live {
            let cond = msg.tagged_cond(f);
            if cond == "false" {
                continue;
            }
            let tag = f.tag.ok_or_else(|| {
                CodegenError::Spec(format!(
                    "{}: tagged field {} has no tag",
                    msg.spec.name, f.name
                ))
            })?;
            let path = format!("{name}.{}", field_ident(&f.name));
            let n = nullable_arg(msg, f);
            let expr = decode_expr(&f.ty, n.as_deref(), "true", &path);
            let guard = if cond == "true" {
                String::new()
            } else {
                format!(" if {cond}")
            };
            let _ = writeln!(
                out,
                "                    {tag}{guard} => {{ let i = &mut &data[..]; {} }}",
                store_stmt(&f.ty, &field_ident(&f.name), &expr)
            );
        }
        let _ = writeln!(
            out,
            "                    _ => {{ rd::reserve_tagged(&mut this.unknown_tagged_fields, cx, n - k, {:?})?; this.unknown_tagged_fields.push(RawTaggedField {{ tag, data: cx.bytes(data) }}); }}",
            format!("{name}._tagged")
        );
        out.push_str("                }\n            }\n        }\n");
    }
    // Checked in debug builds: `min_len` is a lower bound, or array counts that valid
    // input needs would be refused.
    let _ = writeln!(
        out,
        "        #[cfg(debug_assertions)]\n        debug_assert!(start - i.len() >= Self::min_len(v), \"{name} v{{v}}: {{}} bytes, under min_len\", start - i.len());"
    );
    out.push_str("        Ok(())\n    }\n}\n\n");

    // Encode.
    let _ = writeln!(
        out,
        "impl Encode for {name} {{\n    fn encode(&self, e: &mut Encoder, v: i16) -> Result<(), ProtocolError> {{"
    );
    if flexible_any {
        let _ = writeln!(out, "        let flexible = {};", msg.flexible_expr());
    }
    for f in &live {
        let id = field_ident(&f.name);
        let path = format!("{name}.{id}");
        let fixed = msg.fixed_cond(f);
        let tagged = msg.tagged_cond(f);
        let present = msg.cond(f.versions);
        // A field the version cannot carry must hold its default, unless ignorable.
        if !f.ignorable && present != "true" {
            let d = is_default_expr(f, &format!("self.{id}"))?;
            let _ = writeln!(
                out,
                "        if !({present}) && !({d}) {{ return Err(ProtocolError::FieldNotInVersion {{ field: {path:?}, version: v }}); }}"
            );
        }
        if fixed == "false" {
            continue;
        }
        let compact = if flexible_any {
            msg.compact_expr(f)
        } else {
            "false".into()
        };
        let n = nullable_arg(msg, f);
        let stmt = encode_stmt(&f.ty, n.as_deref(), &compact, &path, &format!("self.{id}"));
        let _ = tagged;
        if fixed == "true" {
            let _ = writeln!(out, "        {stmt}");
        } else {
            let _ = writeln!(out, "        if {fixed} {{ {stmt} }}");
        }
    }
    if flexible_any {
        out.push_str("        if flexible {\n            let mut tagged = TaggedWriter::new();\n");
        for f in &live {
            let cond = msg.tagged_cond(f);
            if cond == "false" {
                continue;
            }
            let id = field_ident(&f.name);
            let path = format!("{name}.{id}");
            let tag = f.tag.unwrap_or(0);
            let d = is_default_expr(f, &format!("self.{id}"))?;
            let n = nullable_arg(msg, f);
            let stmt = encode_stmt(&f.ty, n.as_deref(), "true", &path, &format!("self.{id}"));
            let _ = writeln!(
                out,
                "            if {cond} && !({d}) {{ let e = tagged.begin({tag}); {stmt} }}"
            );
        }
        out.push_str("            tagged.finish(e, &self.unknown_tagged_fields)?;\n        }\n");
    }
    out.push_str("        Ok(())\n    }\n}\n\n");

    if msg.spec.kind == "response" {
        render_error_codes(msg, name, &live, out);
    }

    // Random values for property tests.
    let _ = writeln!(
        out,
        "#[cfg(test)]\nimpl crate::testkit::Arbitrary for {name} {{\n    fn arbitrary(g: &mut crate::testkit::Gen, v: i16) -> Self {{\n        let _ = &g;\n        #[allow(unused_mut)]\n        let mut this = Self::default();"
    );
    let mut known_tags = Vec::new();
    for f in &live {
        let present = msg.cond(f.versions);
        let id = field_ident(&f.name);
        let n = nullable_arg(msg, f);
        let expr = arb_expr(&f.ty, n.as_deref());
        if msg.tagged_cond(f) != "false" {
            known_tags.push(f.tag.unwrap_or(0));
        }
        if present == "true" {
            let _ = writeln!(out, "        this.{id} = {expr};");
        } else {
            let _ = writeln!(out, "        if {present} {{ this.{id} = {expr}; }}");
        }
    }
    if flexible_any {
        let tags: Vec<String> = known_tags.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(
            out,
            "        if {} {{ this.unknown_tagged_fields = g.unknown_tags(&[{}]); }}",
            msg.flexible_expr(),
            tags.join(", ")
        );
    }
    out.push_str("        this\n    }\n}\n\n");
    Ok(())
}

fn module_name(spec: &str) -> String {
    snake(spec)
}

fn render_message(cfg: &MessageConfig, spec: &Spec) -> Result<String, CodegenError> {
    let mut structs = BTreeMap::new();
    collect_structs(&spec.fields, &mut structs);
    for cs in &spec.common_structs {
        structs.insert(cs.name.clone(), cs.clone());
        collect_structs(&cs.fields, &mut structs);
    }
    let mut msg = Msg {
        cfg,
        spec,
        structs,
        min_len: BTreeMap::new(),
    };
    let mut out = String::new();
    let flex = match spec.flexible.and_then(|f| intersect(f, msg.range())) {
        Some(f) => format!(", flexible from version {}", f.min),
        None => ", never flexible".into(),
    };
    let key = match spec.api_key {
        Some(k) => format!(" (API key {k})"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "//! `{}`{key}: versions {}-{}{flex}.\n//!\n//! Generated by `kafka-codegen` from `{}.json`. Do not edit by hand.\n",
        spec.name, cfg.min, cfg.max, cfg.spec
    );
    out.push_str("#![allow(clippy::all, clippy::pedantic, unused_parens, unused_assignments, unused_variables, unused_mut, dead_code)]\n\n");
    out.push_str("use crate::wire::prelude::*;\n#[cfg(test)]\n#[allow(unused_imports)]\nuse crate::testkit::Arbitrary;\n\n");

    let top_fields = spec.fields.clone();
    render_struct(&mut msg, &spec.name, &top_fields, true, &mut out)?;
    let names: Vec<String> = msg.structs.keys().cloned().collect();
    for n in names {
        let Some(def) = msg.structs.get(&n).cloned() else {
            continue;
        };
        render_struct(&mut msg, &def.name, &def.fields, false, &mut out)?;
    }

    let flexible_min = match spec.flexible.and_then(|f| intersect(f, msg.range())) {
        Some(f) => format!("Some({})", f.min),
        None => "None".into(),
    };
    let _ = writeln!(
        out,
        "impl Message for {} {{\n    const NAME: &'static str = {:?};\n    const VERSIONS: VersionRange = VersionRange::new({}, {});\n    const FLEXIBLE_FROM: Option<i16> = {flexible_min};\n}}",
        spec.name, spec.name, cfg.min, cfg.max
    );
    Ok(out)
}

struct Api {
    key: i16,
    name: String,
    min: i16,
    max: i16,
    flexible_from: Option<i16>,
    req_mod: String,
    resp_mod: String,
}

fn render_mod(specs: &[(&MessageConfig, Spec)]) -> Result<String, CodegenError> {
    let mut apis: Vec<Api> = Vec::new();
    let mut out = String::new();
    out.push_str("//! Every generated message, the `ApiKey` table and the request/response enums.\n//!\n//! Generated by `kafka-codegen`. Do not edit by hand.\n\n");
    out.push_str("#![allow(clippy::all, clippy::pedantic)]\n\n");
    for (cfg, _) in specs {
        let _ = writeln!(out, "pub mod {};", module_name(cfg.spec));
    }
    out.push('\n');
    for (cfg, spec) in specs {
        if spec.kind != "request" {
            continue;
        }
        let Some(key) = spec.api_key else { continue };
        let base = spec.name.trim_end_matches("Request").to_string();
        let flexible_from = spec.flexible.and_then(|f| {
            intersect(
                f,
                Range {
                    min: cfg.min,
                    max: cfg.max,
                },
            )
            .map(|r| r.min)
        });
        apis.push(Api {
            key,
            name: base.clone(),
            min: cfg.min,
            max: cfg.max,
            flexible_from,
            req_mod: module_name(cfg.spec),
            resp_mod: module_name(&format!("{base}Response")),
        });
    }
    apis.sort_by_key(|a| a.key);

    out.push_str("use crate::wire::prelude::*;\n\n");

    // ApiKey.
    out.push_str(
        "/// A Kafka API key. Keys this crate has no messages for are kept as `Unknown`.\n",
    );
    out.push_str("#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\n#[non_exhaustive]\npub enum ApiKey {\n");
    for a in &apis {
        let _ = writeln!(out, "    /// Key {}.\n    {},", a.key, a.name);
    }
    out.push_str("    /// A key without generated messages.\n    Unknown(i16),\n}\n\n");
    out.push_str("impl ApiKey {\n");
    out.push_str("    /// Every key with generated messages, in key order.\n    pub const ALL: &'static [ApiKey] = &[");
    for a in &apis {
        let _ = write!(out, "ApiKey::{}, ", a.name);
    }
    out.push_str("];\n\n");
    out.push_str("    /// The key for a wire value.\n    pub const fn from_i16(key: i16) -> ApiKey {\n        match key {\n");
    for a in &apis {
        let _ = writeln!(out, "            {} => ApiKey::{},", a.key, a.name);
    }
    out.push_str("            other => ApiKey::Unknown(other),\n        }\n    }\n\n");
    out.push_str(
        "    /// The wire value.\n    pub const fn as_i16(self) -> i16 {\n        match self {\n",
    );
    for a in &apis {
        let _ = writeln!(out, "            ApiKey::{} => {},", a.name, a.key);
    }
    out.push_str("            ApiKey::Unknown(k) => k,\n        }\n    }\n\n");
    out.push_str("    /// The API's name as Kafka spells it.\n    pub const fn name(self) -> &'static str {\n        match self {\n");
    for a in &apis {
        let _ = writeln!(out, "            ApiKey::{} => {:?},", a.name, a.name);
    }
    out.push_str("            ApiKey::Unknown(_) => \"Unknown\",\n        }\n    }\n\n");
    out.push_str("    /// The versions this crate can decode and encode, `None` for unknown keys.\n    pub const fn versions(self) -> Option<VersionRange> {\n        match self {\n");
    for a in &apis {
        let _ = writeln!(
            out,
            "            ApiKey::{} => Some(VersionRange::new({}, {})),",
            a.name, a.min, a.max
        );
    }
    out.push_str("            ApiKey::Unknown(_) => None,\n        }\n    }\n\n");
    out.push_str("    /// The first flexible version (compact encodings and tagged fields), if any.\n    pub const fn flexible_from(self) -> Option<i16> {\n        match self {\n");
    for a in &apis {
        let v = match a.flexible_from {
            Some(v) => format!("Some({v})"),
            None => "None".into(),
        };
        let _ = writeln!(out, "            ApiKey::{} => {v},", a.name);
    }
    out.push_str("            ApiKey::Unknown(_) => None,\n        }\n    }\n}\n\n");

    // Request and response enums.
    for (kind, field) in [("Request", "req_mod"), ("Response", "resp_mod")] {
        let module = |a: &Api| -> String {
            if field == "req_mod" {
                a.req_mod.clone()
            } else {
                a.resp_mod.clone()
            }
        };
        let _ = writeln!(
            out,
            "/// Any {} body this crate knows, tagged by API.\n#[derive(Debug, Clone, PartialEq)]\n#[non_exhaustive]\npub enum {kind}Body {{",
            kind.to_lowercase()
        );
        for a in &apis {
            let m = module(a);
            let _ = writeln!(
                out,
                "    /// {} {}.\n    {}({m}::{}{kind}),",
                a.name,
                kind.to_lowercase(),
                a.name,
                a.name
            );
        }
        out.push_str("}\n\n");
        let _ = writeln!(out, "impl {kind}Body {{");
        out.push_str("    /// The API this body belongs to.\n    pub fn api_key(&self) -> ApiKey {\n        match self {\n");
        for a in &apis {
            let _ = writeln!(
                out,
                "            {kind}Body::{}(_) => ApiKey::{},",
                a.name, a.name
            );
        }
        out.push_str("        }\n    }\n\n");
        out.push_str("    /// Calls `f(size, min)` for every list a body of `api_key` can hold at `version`\n    /// (see the messages' `lists`); nothing for an unknown key.\n");
        out.push_str("    pub fn lists_of(api_key: ApiKey, version: i16, f: &mut dyn FnMut(usize, usize)) {\n        match api_key {\n");
        for a in &apis {
            let m = module(a);
            let _ = writeln!(
                out,
                "            ApiKey::{} => {m}::{}{kind}::lists(version, f),",
                a.name, a.name
            );
        }
        out.push_str("            ApiKey::Unknown(_) => {}\n        }\n    }\n\n");
        out.push_str("    /// A default body of `api_key` (what decoding fills in).\n");
        out.push_str("    #[inline]\n    pub fn default_for(api_key: ApiKey) -> Res<Self> {\n        match api_key {\n");
        for a in &apis {
            let m = module(a);
            let _ = writeln!(
                out,
                "            ApiKey::{} => Ok({kind}Body::{}({m}::{}{kind}::default())),",
                a.name, a.name, a.name
            );
        }
        out.push_str("            ApiKey::Unknown(k) => Err(ProtocolError::UnknownApiKey { api_key: k }),\n        }\n    }\n\n");
        out.push_str(
            "    /// Decodes the body at `version` in place; `self` comes from [`Self::default_for`]\n    /// and the version must be in range.\n",
        );
        out.push_str("    pub(crate) fn read_into(&mut self, version: i16, i: &mut &[u8], cx: &Cx<'_>) -> Res<()> {\n        match self {\n");
        for a in &apis {
            let _ = writeln!(
                out,
                "            {kind}Body::{}(b) => b.read_into(i, cx, version),",
                a.name
            );
        }
        out.push_str("        }\n    }\n\n");
        out.push_str("    /// Encodes the body at `version` (the caller checks the range).\n");
        out.push_str("    pub(crate) fn encode_body(&self, e: &mut Encoder, version: i16) -> Result<(), ProtocolError> {\n        match self {\n");
        for a in &apis {
            let _ = writeln!(
                out,
                "            {kind}Body::{}(b) => b.encode(e, version),",
                a.name
            );
        }
        out.push_str("        }\n    }\n");
        if kind == "Response" {
            out.push_str("\n    /// Calls `f` with the value of every error code field the body carries at `version`\n    /// (in declaration order, nested ones included), zeros included.\n");
            out.push_str("    pub fn for_each_error_code(&self, version: i16, f: &mut impl FnMut(i16)) {\n        match self {\n");
            for a in &apis {
                let _ = writeln!(
                    out,
                    "            {kind}Body::{}(b) => b.for_each_error_code(version, f),",
                    a.name
                );
            }
            out.push_str("        }\n    }\n");
        }
        out.push_str("}\n\n");
        for a in &apis {
            let m = module(a);
            let _ = writeln!(
                out,
                "impl From<{m}::{n}{kind}> for {kind}Body {{\n    fn from(b: {m}::{n}{kind}) -> Self {{\n        {kind}Body::{n}(b)\n    }}\n}}\n",
                n = a.name
            );
        }
    }

    // Request -> response type link.
    for a in &apis {
        let _ = writeln!(
            out,
            "impl Request for {}::{n}Request {{\n    const API_KEY: ApiKey = ApiKey::{n};\n    type Response = {}::{n}Response;\n}}\n",
            a.req_mod,
            a.resp_mod,
            n = a.name
        );
    }

    // Property-test registry.
    out.push_str("/// Round-trip hooks for every message, used by the property tests.\n#[cfg(test)]\npub(crate) const ALL_MESSAGES: &[crate::testkit::MessageHooks] = &[\n");
    for (cfg, spec) in specs {
        let _ = writeln!(
            out,
            "    crate::testkit::hooks::<{}::{}>(),",
            module_name(cfg.spec),
            spec.name
        );
    }
    out.push_str("];\n");
    Ok(out)
}

/// Renders every module and the `mod.rs` that ties them together.
pub fn render(specs: &[(&MessageConfig, Spec)]) -> Result<Vec<(PathBuf, String)>, CodegenError> {
    let mut files = Vec::new();
    for (cfg, spec) in specs {
        files.push((
            PathBuf::from(format!("{}.rs", module_name(cfg.spec))),
            render_message(cfg, spec)?,
        ));
    }
    files.push((PathBuf::from("mod.rs"), render_mod(specs)?));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_spec;

    /// LeaveGroup's shape: members (a struct whose fields all start at v3) from v3,
    /// flexible from v4, a nullable string, a field added at v5 and one tagged field.
    const SPEC: &str = r#"{
      "apiKey": 13, "type": "request", "name": "LeaveGroupRequest",
      "validVersions": "0-5", "flexibleVersions": "4+",
      "fields": [
        { "name": "GroupId", "type": "string", "versions": "0+" },
        { "name": "MemberId", "type": "string", "versions": "0-2" },
        { "name": "Members", "type": "[]MemberIdentity", "versions": "3+", "fields": [
            { "name": "MemberId", "type": "string", "versions": "3+" },
            { "name": "GroupInstanceId", "type": "string", "versions": "3+",
              "nullableVersions": "3+" },
            { "name": "Reason", "type": "string", "versions": "5+", "nullableVersions": "5+",
              "tag": 0, "taggedVersions": "5+" },
            { "name": "Epoch", "type": "int32", "versions": "5+" }
        ]},
        { "name": "Holder", "type": "Inner", "versions": "1+", "nullableVersions": "2+",
          "fields": [ { "name": "Id", "type": "int64", "versions": "0+" } ] }
      ]
    }"#;

    fn min_lens(name: &str) -> Vec<usize> {
        let spec = parse_spec(SPEC).unwrap_or_else(|e| panic!("{e}"));
        let cfg = MessageConfig {
            spec: "LeaveGroupRequest",
            min: 0,
            max: 5,
        };
        let mut structs = BTreeMap::new();
        collect_structs(&spec.fields, &mut structs);
        let mut msg = Msg {
            cfg: &cfg,
            spec: &spec,
            structs,
            min_len: BTreeMap::new(),
        };
        (0..=5).map(|v| msg.struct_min_len(name, v)).collect()
    }

    #[test]
    fn struct_minimums_are_exact_per_version() {
        // Absent before v3; two classic strings; two compact strings and the tagged
        // count; plus the int32 from v5 (the tagged field takes nothing).
        assert_eq!(min_lens("MemberIdentity"), [0, 0, 0, 4, 3, 7]);
        // Top level: v0 two strings; v1 two strings and the holder, which has its null
        // marker (nullable at other versions) and its int64; v2 the holder may be null:
        // marker only; v3 group id, members count, marker; v4+ compact string, count,
        // marker and the tagged count.
        assert_eq!(min_lens("LeaveGroupRequest"), [4, 13, 5, 7, 4, 4]);
    }
}
