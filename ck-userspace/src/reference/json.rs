//! `status-json.md`, `maps-json.md` and their JSON Schemas: `ck status --json` and `ck maps
//! --json` print [`StatusReport`] and [`InstanceMaps`] with serde, and `schemars` derives each
//! schema from the same types (their doc comments become the descriptions); the pages are
//! tables read from those schemas.
use std::fmt::Write as _;

use serde_json::Value;

use super::text::{GENERATED, cell};
use crate::{bpf::dump::InstanceMaps, control::StatusReport};

/// One JSON output of a command.
pub struct Output {
    /// The command (`ck status --json`).
    command: &'static str,
    /// The page's title.
    title: &'static str,
    /// The schema's file name.
    schema_file: &'static str,
    /// The schema.
    schema: fn() -> schemars::Schema,
}

/// `ck status --json`.
pub const STATUS: Output = Output {
    command: "ck status --json",
    title: "`ck status --json`",
    schema_file: "status.schema.json",
    schema: || schemars::schema_for!(StatusReport),
};

/// `ck maps --json`.
pub const MAPS: Output = Output {
    command: "ck maps --json",
    title: "`ck maps --json`",
    schema_file: "maps.schema.json",
    schema: || schemars::schema_for!(InstanceMaps),
};

impl Output {
    /// The schema as a JSON value.
    pub fn schema(&self) -> Value {
        (self.schema)().to_value()
    }

    /// The schema's file: pretty JSON and a final newline.
    pub fn schema_text(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(&self.schema())? + "\n")
    }

    /// The page: one table per object type, the top one first.
    pub fn markdown(&self) -> anyhow::Result<String> {
        let schema = self.schema();
        let mut out = format!(
            "{GENERATED}\n\n# {}\n\n`{}` prints one JSON object, described here type by type \
             (the top one first) and as a JSON Schema in [{}]({}). This version prints every \
             field; those not required may be missing from the output of older versions. Fields \
             may be added in later versions.\n",
            self.title, self.command, self.schema_file, self.schema_file
        );
        let title = schema["title"].as_str().unwrap_or("output").to_string();
        object(&mut out, &title, &schema);
        if let Some(defs) = schema["$defs"].as_object() {
            for (name, def) in defs {
                object(&mut out, name, def);
            }
        }
        Ok(out)
    }
}

/// `## NAME`, its description and a table of its fields (or its values).
fn object(out: &mut String, name: &str, schema: &Value) {
    let _ = write!(out, "\n## {name}\n\n");
    if let Some(description) = schema["description"].as_str() {
        let _ = write!(out, "{}\n\n", cell(description));
    }
    if let Some(values) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        out.push_str("| Value | Meaning |\n| --- | --- |\n");
        for v in values {
            let value = v["const"]
                .as_str()
                .map_or_else(|| kind(v), |c| format!("`\"{c}\"`"));
            let _ = writeln!(out, "| {value} | {} |", describe(v));
        }
        return;
    }
    let Some(properties) = schema["properties"].as_object() else {
        let _ = writeln!(out, "Type: {}", kind(schema));
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("| Field | Type | Required | Meaning |\n| --- | --- | --- | --- |\n");
    for (field, property) in properties {
        let needed = if required.contains(&field.as_str()) {
            "yes"
        } else {
            "no"
        };
        let _ = writeln!(
            out,
            "| `{field}` | {} | {needed} | {} |",
            kind(property),
            describe(property)
        );
    }
}

fn describe(schema: &Value) -> String {
    cell(schema["description"].as_str().unwrap_or(""))
}

/// A property's type in words, with links to the object types it names.
fn kind(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return format!("[{name}](#{})", name.to_lowercase());
    }
    if let Some(any) = schema["anyOf"].as_array().or(schema["oneOf"].as_array()) {
        let kinds: Vec<String> = any.iter().map(kind).collect();
        return kinds.join(" or ");
    }
    if let Some(c) = schema.get("const") {
        return format!("`{c}`");
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let words: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "array" => match (&schema["prefixItems"], &schema["items"]) {
                (Value::Array(items), _) => {
                    let items: Vec<String> = items.iter().map(kind).collect();
                    format!("[{}]", items.join(", "))
                }
                (_, Value::Null) => "array".to_string(),
                (_, items) => format!("array of {}", kind(items)),
            },
            other => other.to_string(),
        })
        .collect();
    if words.is_empty() {
        "any".into()
    } else {
        words.join(" or ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_page_has_every_field_of_the_type() {
        let page = STATUS.markdown().unwrap();
        for field in ["uptime_ms", "slots", "quiet_wait", "host_drained"] {
            assert!(page.contains(&format!("| `{field}` |")), "{field}: {page}");
        }
        assert!(page.contains("## SlotReport"), "{page}");
        assert!(page.contains("`\"least-queue\"`"), "{page}");
        let schema = STATUS.schema();
        assert_eq!(schema["title"], "StatusReport");
        assert!(
            schema["required"]
                .as_array()
                .unwrap()
                .contains(&"pid".into())
        );
        let maps = MAPS.markdown().unwrap();
        assert!(
            maps.contains("| `no_slot` | [Counters](#counters) | yes |"),
            "{maps}"
        );
    }
}
