//! Tool arguments: checked against the tool's table entry before anything runs.

use serde_json::{Map, Value};

use super::spec::{ParamType, ToolSpec};
use crate::protocol::{ErrorCode, ToolError};

pub(crate) fn invalid(message: String) -> ToolError {
    ToolError::new(ErrorCode::InvalidArgs, message)
}

/// A command line or prompt: not blank, no NUL (it becomes a process argument), bounded.
pub(crate) fn check_text(field: &str, text: &str, max: usize) -> Result<(), ToolError> {
    if text.trim().is_empty() {
        return Err(invalid(format!("field `{field}` is empty")));
    }
    if text.contains('\0') {
        return Err(invalid(format!("field `{field}` contains a NUL byte")));
    }
    if text.len() > max {
        return Err(ToolError::new(
            ErrorCode::TooLarge,
            format!("field `{field}` is {} bytes; at most {max} are accepted", text.len()),
        ));
    }
    Ok(())
}

/// Arguments checked against a tool's table entry: an object, no unknown fields, every required
/// field present, every field of its declared type. `null` counts as absent.
pub(crate) struct Args<'a> {
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Args<'a> {
    pub(crate) fn check(spec: &ToolSpec, args: &'a Value) -> Result<Self, ToolError> {
        let map = match args {
            Value::Null => None,
            Value::Object(map) => Some(map),
            _ => return Err(invalid(format!("arguments of {} must be a JSON object", spec.name))),
        };
        if let Some(map) = map {
            if let Some(unknown) = map.keys().find(|key| !spec.params.iter().any(|param| param.name == key.as_str())) {
                let known: Vec<&str> = spec.params.iter().map(|param| param.name).collect();
                return Err(invalid(format!(
                    "unknown field `{}` ({} takes: {})",
                    crate::text::prefix(unknown, 64),
                    spec.name,
                    known.join(", ")
                )));
            }
        }
        for param in spec.params {
            let value = map.and_then(|map| map.get(param.name)).filter(|value| !value.is_null());
            let Some(value) = value else {
                if param.required {
                    return Err(invalid(format!("missing {} field `{}`", param.kind.noun(), param.name)));
                }
                continue;
            };
            let fits = match param.kind {
                ParamType::String => value.is_string(),
                ParamType::Boolean => value.is_boolean(),
                ParamType::Integer => integer(value).is_some(),
                ParamType::Object => value.is_object(),
            };
            if !fits {
                let article = if param.kind == ParamType::Integer { "a non-negative" } else { "a" };
                return Err(invalid(format!("field `{}` must be {article} {}", param.name, param.kind.noun())));
            }
        }
        Ok(Args { map })
    }

    /// The arguments as a JSON object (`{}` when none were given).
    pub(crate) fn value(&self) -> Value {
        Value::Object(self.map.cloned().unwrap_or_default())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.and_then(|map| map.get(name)).filter(|value| !value.is_null())
    }

    pub(crate) fn str(&self, name: &str) -> Option<&'a str> {
        self.get(name).and_then(Value::as_str)
    }

    pub(crate) fn u64(&self, name: &str) -> Option<u64> {
        self.get(name).and_then(integer)
    }

    pub(crate) fn bool(&self, name: &str) -> Option<bool> {
        self.get(name).and_then(Value::as_bool)
    }
}

/// A non-negative integer, also when a client sent it as a whole float (`5000.0`).
pub(crate) fn integer(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|float| float.fract() == 0.0 && *float >= 0.0 && *float <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}
