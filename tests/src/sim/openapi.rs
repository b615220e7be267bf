//! A small OpenAPI 3.0 request/response validator for the provider simulators.
//!
//! It loads an OpenAPI document (the Fly Machines description in `specs/` is bundled, see
//! [`Spec::fly`]) and checks one HTTP exchange against it:
//!
//! - the path matches a path template (`/v1/apps/{app_name}`; literal segments win over
//!   parameters) and the method is declared for it;
//! - path, query and header parameters: required ones are present, values parse as the
//!   declared type (`string`, `integer`, `boolean`, `number`) and are in `enum`. Query
//!   parameters the operation does not declare are violations (the real service would
//!   ignore them, which hides a client bug). A parameter named like `metadata.{key}` matches
//!   any `metadata.<something>`. A string parameter whose description says it takes
//!   comma-separated values is checked item by item;
//! - the JSON body against its schema: `$ref` (to `#/components/schemas/...`), `allOf`,
//!   `type`, `nullable`, `required`, `properties`, `additionalProperties` (schema or bool),
//!   `items`, `enum`, `minimum`, `maximum`, `minLength`. A property that an object schema
//!   does not declare is a violation when the schema declares any properties (free-form
//!   `{"type": "object"}` schemas accept anything). In requests, a property or query
//!   parameter documented as deprecated ("Deprecated: ...") is a violation too;
//! - a response body against the schema declared for its status (error statuses the
//!   document does not list are checked against `ErrorResponse` when it exists).
//!
//! Swagger-to-OpenAPI conversion artefacts handled on purpose: a property such as
//! `{"type": "object", "allOf": [{"$ref": "...StringEnum"}]}` takes its type from the
//! `allOf` member (the outer `object` is a generator bug; the service takes a string).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};

/// The Fly Machines API description (OpenAPI 3.0.1) saved in `specs/`.
const FLY_SPEC: &str = include_str!("../../../specs/fly-machines-openapi.json");

/// A parsed OpenAPI document and its operations.
pub struct Spec {
    doc: Value,
    ops: Vec<Op>,
}

/// One operation (method + path template).
#[derive(Debug)]
pub struct Op {
    /// Upper-case HTTP method.
    pub method: String,
    /// The path template as written in the document, e.g. `/v1/apps/{app_name}`.
    pub template: String,
    /// `operationId` (empty when absent).
    pub operation_id: String,
    segments: Vec<Segment>,
    params: Vec<Value>,
    body: Option<Value>,
    body_required: bool,
    responses: Map<String, Value>,
}

#[derive(Debug)]
enum Segment {
    Literal(String),
    Param(String),
}

/// The parts of an HTTP request the validator looks at.
pub struct RequestParts<'a> {
    /// HTTP method (any case).
    pub method: &'a str,
    /// Raw (percent-encoded) path, without the query.
    pub path: &'a str,
    /// Raw query string, without `?`.
    pub query: Option<&'a str>,
    /// Header lookup by lower-case name.
    pub header: &'a (dyn Fn(&str) -> Option<String> + Send + Sync),
    /// The raw body (empty when none).
    pub body: &'a [u8],
}

/// An operation and the decoded path parameters of a request path.
pub type Found<'a> = (&'a Op, BTreeMap<String, String>);

/// A request that matched an operation and passed validation.
#[derive(Debug)]
pub struct Matched<'a> {
    /// The operation.
    pub op: &'a Op,
    /// Decoded path parameters by name.
    pub path_params: BTreeMap<String, String>,
    /// Decoded query parameters, in order (repeats kept).
    pub query: Vec<(String, String)>,
    /// The parsed JSON body, when there was one.
    pub body: Option<Value>,
}

/// Why a request was rejected.
#[derive(Debug)]
pub struct Rejection {
    /// `METHOD /template` when the path and method matched an operation.
    pub template: Option<String>,
    /// What is wrong, one item per problem.
    pub problems: Vec<String>,
}

impl Spec {
    /// The bundled Fly Machines description, parsed once.
    pub fn fly() -> &'static Spec {
        static SPEC: OnceLock<Spec> = OnceLock::new();
        SPEC.get_or_init(|| match Spec::from_json(FLY_SPEC) {
            Ok(s) => s,
            // The document is compiled in; a parse failure is a build problem.
            Err(e) => panic!("bundled Fly OpenAPI document: {e:#}"),
        })
    }

    /// Parses an OpenAPI 3.0 document.
    pub fn from_json(text: &str) -> Result<Spec> {
        let doc: Value = serde_json::from_str(text).context("OpenAPI document is not JSON")?;
        let paths = doc
            .get("paths")
            .and_then(Value::as_object)
            .context("OpenAPI document has no paths")?;
        let mut ops = Vec::new();
        for (template, item) in paths {
            let Some(item) = item.as_object() else {
                bail!("path item {template} is not an object");
            };
            let shared: Vec<Value> = item
                .get("parameters")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (method, op) in item {
                if !matches!(
                    method.as_str(),
                    "get" | "put" | "post" | "delete" | "patch" | "head" | "options"
                ) {
                    continue;
                }
                let mut params = shared.clone();
                if let Some(own) = op.get("parameters").and_then(Value::as_array) {
                    params.extend(own.iter().cloned());
                }
                let body = op
                    .pointer("/requestBody/content/application~1json/schema")
                    .cloned();
                let body_required = op
                    .pointer("/requestBody/required")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                ops.push(Op {
                    method: method.to_uppercase(),
                    template: template.clone(),
                    operation_id: op
                        .get("operationId")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    segments: template
                        .split('/')
                        .filter(|s| !s.is_empty())
                        .map(
                            |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                                Some(name) => Segment::Param(name.to_owned()),
                                None => Segment::Literal(s.to_owned()),
                            },
                        )
                        .collect(),
                    params,
                    body,
                    body_required,
                    responses: op
                        .get("responses")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
        }
        Ok(Spec { doc, ops })
    }

    /// Every operation of the document.
    pub fn operations(&self) -> &[Op] {
        &self.ops
    }

    /// Finds the operation for `method` + raw `path`; the path parameters are decoded.
    /// `Err` says whether the path exists at all (`Some(methods)`) or not (`None`).
    pub fn find(
        &self,
        method: &str,
        path: &str,
    ) -> std::result::Result<Found<'_>, Option<Vec<String>>> {
        let segs: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let mut best: Option<(usize, &str)> = None;
        for op in &self.ops {
            if let Some(score) = match_segments(&op.segments, &segs)
                && best.is_none_or(|(s, _)| score > s)
            {
                best = Some((score, op.template.as_str()));
            }
        }
        let Some((_, template)) = best else {
            return Err(None);
        };
        let method = method.to_uppercase();
        let same_path = self.ops.iter().filter(|o| o.template == template);
        let mut methods = Vec::new();
        for op in same_path {
            if op.method == method {
                let mut params = BTreeMap::new();
                for (seg, value) in op.segments.iter().zip(&segs) {
                    if let Segment::Param(name) = seg {
                        params.insert(name.clone(), value.clone());
                    }
                }
                return Ok((op, params));
            }
            methods.push(op.method.clone());
        }
        Err(Some(methods))
    }

    /// Validates a whole request. On success the decoded parts are returned.
    pub fn check_request(
        &self,
        req: &RequestParts<'_>,
    ) -> std::result::Result<Matched<'_>, Rejection> {
        let (op, path_params) = match self.find(req.method, req.path) {
            Ok(found) => found,
            Err(None) => {
                return Err(Rejection {
                    template: None,
                    problems: vec![format!("no path of the API matches {}", req.path)],
                });
            }
            Err(Some(methods)) => {
                return Err(Rejection {
                    template: None,
                    problems: vec![format!(
                        "method {} is not declared for {} (declared: {})",
                        req.method.to_uppercase(),
                        req.path,
                        methods.join(", ")
                    )],
                });
            }
        };
        let mut problems = Vec::new();
        let query = parse_query(req.query.unwrap_or_default());

        // Parameters.
        let mut declared_query: Vec<(&str, &Value)> = Vec::new();
        for p in &op.params {
            let p = self.resolve(p);
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            let location = p.get("in").and_then(Value::as_str).unwrap_or_default();
            let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
            let schema = p.get("schema").unwrap_or(&Value::Null);
            let comma_list = p
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| d.to_lowercase().contains("comma"));
            let values: Vec<String> = match location {
                "path" => path_params.get(name).cloned().into_iter().collect(),
                "query" => {
                    declared_query.push((name, p));
                    query
                        .iter()
                        .filter(|(k, _)| param_name_matches(name, k))
                        .map(|(_, v)| v.clone())
                        .collect()
                }
                "header" => (req.header)(&name.to_lowercase()).into_iter().collect(),
                _ => Vec::new(),
            };
            if values.is_empty() {
                if required {
                    problems.push(format!("required {location} parameter `{name}` is missing"));
                }
                continue;
            }
            if location == "query" && is_deprecated(p) {
                problems.push(format!(
                    "query parameter `{name}` is deprecated: {}",
                    describe(p)
                ));
            }
            for v in &values {
                let items: Vec<&str> = if comma_list {
                    v.split(',').collect()
                } else {
                    vec![v.as_str()]
                };
                for item in items {
                    if let Err(e) = self.check_param_value(schema, item) {
                        problems.push(format!("{location} parameter `{name}`={item:?}: {e}"));
                    }
                }
            }
        }
        for (k, _) in &query {
            if !declared_query
                .iter()
                .any(|(name, _)| param_name_matches(name, k))
            {
                problems.push(format!(
                    "query parameter `{k}` is not declared for {} {}",
                    op.method, op.template
                ));
            }
        }

        // Body.
        let mut body = None;
        let has_body = !req.body.iter().all(u8::is_ascii_whitespace);
        match (&op.body, has_body) {
            (None, true) => problems.push(format!(
                "{} {} takes no request body, got {} bytes",
                op.method,
                op.template,
                req.body.len()
            )),
            (Some(_), false) if op.body_required => {
                problems.push("the request body is required".to_owned());
            }
            (Some(schema), true) => {
                let ct = (req.header)("content-type").unwrap_or_default();
                if !ct.to_lowercase().starts_with("application/json") {
                    problems.push(format!("content-type must be application/json, got {ct:?}"));
                }
                match serde_json::from_slice::<Value>(req.body) {
                    Ok(v) => {
                        self.validate_into(schema, &v, "body", true, &mut problems);
                        body = Some(v);
                    }
                    Err(e) => problems.push(format!("the request body is not JSON: {e}")),
                }
            }
            _ => {}
        }
        if problems.is_empty() {
            Ok(Matched {
                op,
                path_params,
                query,
                body,
            })
        } else {
            Err(Rejection {
                template: Some(format!("{} {}", op.method, op.template)),
                problems,
            })
        }
    }

    /// Checks a response produced for `op`. A status the operation does not declare is
    /// checked against `ErrorResponse` when it is an error status.
    pub fn check_response(&self, op: &Op, status: u16, body: Option<&Value>) -> Vec<String> {
        let mut problems = Vec::new();
        let declared = op
            .responses
            .get(&status.to_string())
            .or_else(|| op.responses.get("default"));
        let schema = match declared {
            Some(r) => {
                let r = self.resolve(r);
                r.pointer("/content/application~1json/schema").cloned()
            }
            None if status >= 400 => self
                .doc
                .pointer("/components/schemas/ErrorResponse")
                .map(|_| serde_json::json!({"$ref": "#/components/schemas/ErrorResponse"})),
            None => {
                problems.push(format!(
                    "status {status} is not declared for {} {}",
                    op.method, op.template
                ));
                None
            }
        };
        if let (Some(schema), Some(body)) = (schema, body) {
            self.validate_into(&schema, body, "response", false, &mut problems);
        }
        problems
    }

    /// Validates `value` against the component schema `name` (request rules).
    pub fn check_schema(&self, name: &str, value: &Value) -> Vec<String> {
        let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
        let mut problems = Vec::new();
        self.validate_into(&schema, value, name, true, &mut problems);
        problems
    }

    /// Validates `value` against `schema`; `request` turns on the deprecated-field rule.
    pub fn validate_into(
        &self,
        schema: &Value,
        value: &Value,
        at: &str,
        request: bool,
        out: &mut Vec<String>,
    ) {
        let flat = match self.flatten(schema, 0) {
            Ok(f) => f,
            Err(e) => {
                out.push(format!("{at}: {e}"));
                return;
            }
        };
        if value.is_null() {
            if !flat.nullable && flat.ty.is_some() {
                out.push(format!(
                    "{at}: expected {}, got null",
                    flat.ty.unwrap_or("value")
                ));
            }
            return;
        }
        if let Some(ty) = flat.ty
            && !type_matches(ty, value)
        {
            out.push(format!("{at}: expected {ty}, got {}", kind(value)));
            return;
        }
        if let Some(allowed) = flat.enumeration
            && !allowed.contains(value)
        {
            out.push(format!(
                "{at}: {value} is not one of {}",
                Value::Array(allowed.clone())
            ));
        }
        if let (Some(min), Some(s)) = (flat.min_length, value.as_str())
            && (s.chars().count() as u64) < min
        {
            out.push(format!("{at}: shorter than {min} characters"));
        }
        if let Some(n) = value.as_f64() {
            if let Some(min) = flat.minimum
                && n < min
            {
                out.push(format!("{at}: {n} is below the minimum {min}"));
            }
            if let Some(max) = flat.maximum
                && n > max
            {
                out.push(format!("{at}: {n} is above the maximum {max}"));
            }
        }
        if let (Some(items), Some(arr)) = (flat.items, value.as_array()) {
            for (i, v) in arr.iter().enumerate() {
                self.validate_into(items, v, &format!("{at}[{i}]"), request, out);
            }
        }
        if let Some(obj) = value.as_object() {
            for r in &flat.required {
                if !obj.contains_key(*r) {
                    out.push(format!("{at}: required property `{r}` is missing"));
                }
            }
            for (k, v) in obj {
                let here = format!("{at}.{k}");
                if let Some(prop) = flat.properties.get(k.as_str()) {
                    if request && self.deprecated_schema(prop) {
                        out.push(format!(
                            "{here}: deprecated field: {}",
                            self.description(prop).unwrap_or_default()
                        ));
                    }
                    self.validate_into(prop, v, &here, request, out);
                    continue;
                }
                match flat.additional {
                    Additional::Schema(s) => self.validate_into(s, v, &here, request, out),
                    Additional::Allowed => {}
                    Additional::Forbidden => out.push(format!("{here}: unknown property")),
                    Additional::Unspecified if flat.properties.is_empty() => {}
                    Additional::Unspecified => out.push(format!(
                        "{here}: unknown property (declared: {})",
                        flat.properties
                            .keys()
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
            }
        }
    }

    fn check_param_value(&self, schema: &Value, raw: &str) -> std::result::Result<(), String> {
        let flat = self.flatten(schema, 0)?;
        let value = match flat.ty {
            Some("integer") => raw
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| "not an integer".to_owned())?,
            Some("number") => raw
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| "not a number".to_owned())?,
            Some("boolean") => match raw {
                "true" | "1" => Value::Bool(true),
                "false" | "0" => Value::Bool(false),
                _ => return Err("not a boolean (true/false)".to_owned()),
            },
            _ => Value::String(raw.to_owned()),
        };
        let mut problems = Vec::new();
        self.validate_into(schema, &value, "value", true, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// Follows `$ref` chains (to anything inside this document).
    fn resolve<'a>(&'a self, mut v: &'a Value) -> &'a Value {
        for _ in 0..32 {
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) => match r.strip_prefix('#').and_then(|p| self.doc.pointer(p)) {
                    Some(target) => v = target,
                    None => return &Value::Null,
                },
                None => return v,
            }
        }
        v
    }

    fn description<'a>(&'a self, schema: &'a Value) -> Option<&'a str> {
        schema
            .get("description")
            .or_else(|| self.resolve(schema).get("description"))
            .and_then(Value::as_str)
    }

    fn deprecated_schema(&self, schema: &Value) -> bool {
        schema.get("deprecated").and_then(Value::as_bool) == Some(true)
            || self
                .description(schema)
                .is_some_and(|d| d.trim_start().starts_with("Deprecated"))
    }

    /// Merges a schema with its `$ref` target and `allOf` members.
    fn flatten<'a>(
        &'a self,
        schema: &'a Value,
        depth: u32,
    ) -> std::result::Result<Flat<'a>, String> {
        if depth > 32 {
            return Err("schema nesting too deep".to_owned());
        }
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let target = r
                .strip_prefix('#')
                .and_then(|p| self.doc.pointer(p))
                .ok_or_else(|| format!("unresolvable $ref {r}"))?;
            return self.flatten(target, depth + 1);
        }
        let mut flat = Flat {
            ty: schema.get("type").and_then(Value::as_str),
            nullable: schema
                .get("nullable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            enumeration: schema.get("enum").and_then(Value::as_array),
            items: schema.get("items"),
            minimum: schema.get("minimum").and_then(Value::as_f64),
            maximum: schema.get("maximum").and_then(Value::as_f64),
            min_length: schema.get("minLength").and_then(Value::as_u64),
            required: schema
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default(),
            properties: schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
                .unwrap_or_default(),
            additional: match schema.get("additionalProperties") {
                None => Additional::Unspecified,
                Some(Value::Bool(true)) => Additional::Allowed,
                Some(Value::Bool(false)) => Additional::Forbidden,
                Some(s) => Additional::Schema(s),
            },
        };
        if let Some(members) = schema.get("allOf").and_then(Value::as_array) {
            for m in members {
                let f = self.flatten(m, depth + 1)?;
                // The member's type wins: see the module docs (generator artefact).
                if f.ty.is_some() {
                    flat.ty = f.ty;
                }
                flat.nullable |= f.nullable;
                flat.enumeration = flat.enumeration.or(f.enumeration);
                flat.items = flat.items.or(f.items);
                flat.minimum = flat.minimum.or(f.minimum);
                flat.maximum = flat.maximum.or(f.maximum);
                flat.min_length = flat.min_length.or(f.min_length);
                flat.required.extend(f.required);
                flat.properties.extend(f.properties);
                if !matches!(f.additional, Additional::Unspecified) {
                    flat.additional = f.additional;
                }
            }
        }
        Ok(flat)
    }
}

struct Flat<'a> {
    ty: Option<&'a str>,
    nullable: bool,
    enumeration: Option<&'a Vec<Value>>,
    items: Option<&'a Value>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    min_length: Option<u64>,
    required: Vec<&'a str>,
    properties: BTreeMap<&'a str, &'a Value>,
    additional: Additional<'a>,
}

enum Additional<'a> {
    Unspecified,
    Allowed,
    Forbidden,
    Schema(&'a Value),
}

fn is_deprecated(param: &Value) -> bool {
    param.get("deprecated").and_then(Value::as_bool) == Some(true)
        || param
            .get("description")
            .and_then(Value::as_str)
            .is_some_and(|d| {
                let d = d.to_lowercase();
                d.trim_start().starts_with("deprecated") || d.contains("(deprecated")
            })
}

fn describe(param: &Value) -> &str {
    param
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Matches a path against template segments; the score counts literal segments.
fn match_segments(template: &[Segment], path: &[String]) -> Option<usize> {
    if template.len() != path.len() {
        return None;
    }
    let mut score = 0;
    for (t, p) in template.iter().zip(path) {
        match t {
            Segment::Literal(l) if l == p => score += 1,
            Segment::Literal(_) => return None,
            Segment::Param(_) if p.is_empty() => return None,
            Segment::Param(_) => {}
        }
    }
    Some(score)
}

/// `metadata.{key}` matches `metadata.anything`; other names match exactly.
fn param_name_matches(declared: &str, actual: &str) -> bool {
    match declared.find('{') {
        Some(i) if declared.ends_with('}') => {
            actual.len() > i && actual.starts_with(&declared[..i])
        }
        _ => declared == actual,
    }
}

fn type_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Splits and decodes an `application/x-www-form-urlencoded` query string.
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

/// Decodes `%XX` escapes (invalid escapes are kept as written).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> &'static Spec {
        Spec::fly()
    }

    fn no_headers(_: &str) -> Option<String> {
        None
    }

    fn json_headers(name: &str) -> Option<String> {
        (name == "content-type").then(|| "application/json".to_owned())
    }

    fn request<'a>(
        method: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        body: &'a [u8],
    ) -> RequestParts<'a> {
        RequestParts {
            method,
            path,
            query,
            header: if body.is_empty() {
                &no_headers
            } else {
                &json_headers
            },
            body,
        }
    }

    fn create_body() -> Value {
        json!({
            "name": "computer-alpha",
            "region": "iad",
            "config": {
                "image": "docker.io/library/debian:bookworm-slim",
                "init": { "exec": ["/bin/sleep", "inf"] },
                "guest": { "cpu_kind": "shared", "cpus": 1, "memory_mb": 512 },
                "rootfs": { "persist": "always" },
                "metadata": { "mcp_computer": "alpha" },
                "restart": { "policy": "always" },
                "auto_destroy": false
            }
        })
    }

    #[test]
    fn the_bundled_document_loads() {
        assert!(spec().operations().len() > 60);
        assert!(
            spec()
                .operations()
                .iter()
                .any(|o| o.operation_id == "Machines_exec")
        );
    }

    #[test]
    fn valid_create_machine_request_passes() {
        assert_eq!(
            spec().check_schema("CreateMachineRequest", &create_body()),
            Vec::<String>::new()
        );
        let body = serde_json::to_vec(&create_body()).unwrap();
        let m = spec()
            .check_request(&request("POST", "/v1/apps/my-app/machines", None, &body))
            .unwrap();
        assert_eq!(m.op.operation_id, "Machines_create");
        assert_eq!(m.path_params["app_name"], "my-app");
    }

    #[test]
    fn wrong_type_is_a_violation() {
        let mut b = create_body();
        b["config"]["guest"]["cpus"] = json!("1");
        let p = spec().check_schema("CreateMachineRequest", &b);
        assert!(
            p.iter()
                .any(|p| p.contains("config.guest.cpus") && p.contains("expected integer")),
            "{p:?}"
        );
        b["config"]["guest"]["cpus"] = json!(1.5);
        assert!(!spec().check_schema("CreateMachineRequest", &b).is_empty());
    }

    #[test]
    fn enum_and_nested_items_are_checked() {
        let mut b = create_body();
        b["config"]["rootfs"]["persist"] = json!("sometimes");
        assert!(!spec().check_schema("CreateMachineRequest", &b).is_empty());
        let mut b = create_body();
        b["config"]["init"]["exec"] = json!(["/bin/sleep", 5]);
        let p = spec().check_schema("CreateMachineRequest", &b);
        assert!(p.iter().any(|p| p.contains("config.init.exec[1]")), "{p:?}");
        let mut b = create_body();
        b["config"]["metadata"]["n"] = json!(3);
        assert!(!spec().check_schema("CreateMachineRequest", &b).is_empty());
    }

    #[test]
    fn missing_required_field_is_a_violation() {
        let b = json!({"config": {"image": "x", "statics": [{"guest_path": "/x"}]}});
        let p = spec().check_schema("CreateMachineRequest", &b);
        assert!(p.iter().any(|p| p.contains("url_prefix")), "{p:?}");
        // A required body that is absent.
        let r = spec()
            .check_request(&request("POST", "/v1/apps/a/machines", None, b""))
            .unwrap_err();
        assert!(r.problems[0].contains("required"), "{r:?}");
    }

    #[test]
    fn unknown_field_is_a_violation() {
        let mut b = create_body();
        b["config"]["persist_rootfs"] = json!("always");
        let p = spec().check_schema("CreateMachineRequest", &b);
        assert!(
            p.iter()
                .any(|p| p.contains("config.persist_rootfs: unknown property")),
            "{p:?}"
        );
        let p = spec().check_schema(
            "CreateAppRequest",
            &json!({"app_name": "x", "org_slug": "personal"}),
        );
        assert!(p.iter().any(|p| p.contains("app_name")), "{p:?}");
    }

    #[test]
    fn deprecated_field_is_a_violation_in_requests() {
        let mut b = create_body();
        b["config"]["guest"]["persist_rootfs"] = json!("always");
        let p = spec().check_schema("CreateMachineRequest", &b);
        assert!(p.iter().any(|p| p.contains("deprecated")), "{p:?}");
        let p = spec().check_schema("MachineExecRequest", &json!({"cmd": "ls"}));
        assert!(p.iter().any(|p| p.contains("deprecated")), "{p:?}");
    }

    #[test]
    fn generator_artefact_types_follow_all_of() {
        // `kind` is declared {type: object, allOf: [string enum]}.
        let hc = json!({"containers": [{"healthchecks": [{"kind": "readiness"}]}]});
        assert_eq!(
            spec().check_schema("fly.MachineConfig", &hc),
            Vec::<String>::new()
        );
        let hc = json!({"containers": [{"healthchecks": [{"kind": "sometimes"}]}]});
        assert!(!spec().check_schema("fly.MachineConfig", &hc).is_empty());
    }

    #[test]
    fn unknown_path_and_method_are_violations() {
        let r = spec()
            .check_request(&request("GET", "/v1/nope", None, b""))
            .unwrap_err();
        assert!(r.template.is_none());
        let r = spec()
            .check_request(&request("PUT", "/v1/apps/a/machines/m/start", None, b""))
            .unwrap_err();
        assert!(r.problems[0].contains("not declared"), "{r:?}");
        let r = spec()
            .check_request(&request("GET", "/v2/apps/a", None, b""))
            .unwrap_err();
        assert!(r.template.is_none());
    }

    #[test]
    fn literal_segments_win_over_parameters() {
        let (op, _) = spec().find("POST", "/v1/apps/a/certificates/acme").unwrap();
        assert_eq!(op.operation_id, "App_Certificates_acme_create");
        let (op, p) = spec().find("GET", "/v1/apps/a%2Db/machines/0123").unwrap();
        assert_eq!(op.operation_id, "Machines_show");
        assert_eq!(p["app_name"], "a-b");
    }

    #[test]
    fn query_parameters_are_checked() {
        let ok = spec().check_request(&request(
            "GET",
            "/v1/apps/a/machines",
            Some("metadata.mcp_computer=alpha&metadata.owner=u%201&include_deleted=true&limit=5"),
            b"",
        ));
        assert!(ok.is_ok(), "{ok:?}");
        let bad = spec()
            .check_request(&request(
                "GET",
                "/v1/apps/a/machines",
                Some("include_deleted=yes&colour=red"),
                b"",
            ))
            .unwrap_err();
        assert_eq!(bad.problems.len(), 2, "{bad:?}");
        let missing = spec()
            .check_request(&request("GET", "/v1/apps", None, b""))
            .unwrap_err();
        assert!(missing.problems[0].contains("org_slug"), "{missing:?}");
        let wait = "/v1/apps/a/machines/m/wait";
        assert!(
            spec()
                .check_request(&request(
                    "GET",
                    wait,
                    Some("state=started,stopped&timeout=30"),
                    b""
                ))
                .is_ok()
        );
        assert!(
            spec()
                .check_request(&request(
                    "GET",
                    wait,
                    Some("state=started&state=stopped"),
                    b""
                ))
                .is_ok()
        );
        assert!(
            spec()
                .check_request(&request("GET", wait, Some("state=running"), b""))
                .is_err()
        );
        assert!(
            spec()
                .check_request(&request("GET", wait, Some("timeout=1m"), b""))
                .is_err()
        );
        assert!(
            spec()
                .check_request(&request("GET", wait, Some("instance_id=x"), b""))
                .is_err()
        );
        assert!(
            spec()
                .check_request(&request(
                    "DELETE",
                    "/v1/apps/a/machines/m",
                    Some("kill=true"),
                    b""
                ))
                .is_err()
        );
    }

    #[test]
    fn body_on_an_operation_without_one_is_a_violation() {
        let r = spec()
            .check_request(&request("POST", "/v1/apps/a/machines/m/start", None, b"{}"))
            .unwrap_err();
        assert!(r.problems[0].contains("takes no request body"), "{r:?}");
        // Optional body: absent is fine.
        assert!(
            spec()
                .check_request(&request("POST", "/v1/apps/a/machines/m/stop", None, b""))
                .is_ok()
        );
    }

    #[test]
    fn responses_are_checked() {
        let (op, _) = spec().find("POST", "/v1/apps/a/machines/m/exec").unwrap();
        let good = json!({"exit_code": 0, "stdout": "hi\n", "stderr": ""});
        assert!(spec().check_response(op, 200, Some(&good)).is_empty());
        let bad = json!({"exit_code": "0", "extra": 1});
        assert_eq!(spec().check_response(op, 200, Some(&bad)).len(), 2);
        let err = json!({"error": "x", "status": "insufficient_capacity"});
        assert!(spec().check_response(op, 422, Some(&err)).is_empty());
        let err = json!({"error": "x", "status": "nope"});
        assert!(!spec().check_response(op, 429, Some(&err)).is_empty());
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%zz%4"), "a b%zz%4");
        assert_eq!(
            parse_query("a=1&b=x+y&c"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y".into()),
                ("c".into(), String::new())
            ]
        );
    }
}
