//! The one builder of Gemini function declarations, from the tool table and the list of names an
//! agent offers (its `hello_ok` list): the self-hosted bridge declares
//! [`Dispatcher::tool_names`](super::Dispatcher::tool_names), a relay hosting the call declares the
//! names the agent listed.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::spec::{ParamType, Runs, ToolKind, ToolSpec};

/// Name of the argument that routes a Gemini function call to another environment.
pub const ENV_ARG: &str = "env";

/// Gemini `functionDeclarations` for the tools `names` lists, in that order: a table tool with its
/// arguments, a name this build does not know (a newer agent's) without any. When the list holds a
/// router tool (`fleet`) the agent drives other environments, and every other tool takes the
/// optional [`ENV_ARG`]. Names Gemini would refuse, and repeats, are left out.
pub fn gemini_declarations<S: AsRef<str>>(names: &[S]) -> Value {
    let routes =
        names.iter().any(|name| ToolKind::parse(name.as_ref()).is_some_and(|kind| kind.spec().runs == Runs::Router));
    let mut seen = HashSet::new();
    let declarations = names
        .iter()
        .map(AsRef::as_ref)
        .filter(|name| gemini_accepts(name) && seen.insert(*name))
        .map(|name| {
            let spec = ToolKind::parse(name).map(ToolKind::spec);
            let mut declaration = match spec {
                Some(spec) => declaration(spec),
                None => json!({ "name": name, "description": format!("The laptop's {name} tool.") }),
            };
            if routes && spec.is_none_or(|spec| spec.runs.routable()) {
                add_env_argument(&mut declaration);
            }
            declaration
        })
        .collect();
    Value::Array(declarations)
}

/// A function name the service takes: a letter or `_` first, then letters, digits, `_.-`, at most 64.
fn gemini_accepts(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn declaration(spec: &ToolSpec) -> Value {
    // An object parameter is left out: the service wants its properties, which it has none of.
    let declared = || spec.params.iter().filter(|param| param.kind != ParamType::Object);
    let properties: Map<String, Value> = declared()
        .map(|param| {
            (param.name.to_owned(), json!({ "type": param.kind.gemini_name(), "description": param.description }))
        })
        .collect();
    let required: Vec<&str> = declared().filter(|param| param.required).map(|param| param.name).collect();
    let mut declaration = json!({ "name": spec.name, "description": spec.description });
    // The service refuses an empty `properties`: a tool without arguments has no `parameters`.
    if !properties.is_empty() {
        let mut parameters = json!({ "type": "OBJECT", "properties": properties });
        if !required.is_empty() {
            parameters["required"] = json!(required);
        }
        declaration["parameters"] = parameters;
    }
    declaration
}

/// Adds the optional [`ENV_ARG`] argument: the tool can run on any environment the agent drives.
fn add_env_argument(declaration: &mut Value) {
    let env = json!({"type": "STRING", "description": "Name of another machine (from fleet) to run this on; omit for this laptop."});
    if declaration.get("parameters").is_none() {
        declaration["parameters"] = json!({"type": "OBJECT", "properties": {}});
    }
    if let Some(properties) = declaration.pointer_mut("/parameters/properties").and_then(Value::as_object_mut) {
        properties.insert(ENV_ARG.into(), env);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(declarations: &Value) -> Vec<&str> {
        declarations.as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect()
    }

    #[test]
    fn the_table_drives_the_declarations() {
        let all: Vec<&str> =
            ToolKind::ALL.into_iter().filter(|k| k.spec().runs.routable()).map(ToolKind::name).collect();
        let declarations = gemini_declarations(&all);
        assert_eq!(names(&declarations), all);
        let run = &declarations[0];
        assert_eq!(run["name"], "run_command");
        assert_eq!(run["parameters"]["type"], "OBJECT");
        assert_eq!(run["parameters"]["properties"]["command"]["type"], "STRING");
        assert_eq!(run["parameters"]["properties"]["timeout_ms"]["type"], "INTEGER");
        assert_eq!(run["parameters"]["required"], json!(["command"]));
        assert_eq!(declarations[2]["parameters"]["properties"]["create_dirs"]["type"], "BOOLEAN");
        for declaration in declarations.as_array().unwrap() {
            assert!(!declaration["description"].as_str().unwrap().is_empty());
            assert!(declaration.pointer("/parameters/properties/env").is_none(), "no router, no env");
            for (_, property) in declaration["parameters"]["properties"].as_object().into_iter().flatten() {
                assert!(!property["description"].as_str().unwrap().is_empty());
            }
        }
    }

    #[test]
    fn a_router_tool_gives_every_other_tool_the_env_argument() {
        let declarations = gemini_declarations(&["read_file", "newer_tool", "fleet"]);
        assert_eq!(names(&declarations), ["read_file", "newer_tool", "fleet"]);
        assert_eq!(declarations[0].pointer("/parameters/properties/env/type"), Some(&json!("STRING")));
        assert_eq!(declarations[1].pointer("/parameters/properties/env/type"), Some(&json!("STRING")));
        assert!(declarations[2].get("parameters").is_none(), "fleet is declared for listing only");
        assert!(declarations[1]["description"].as_str().unwrap().contains("newer_tool"));
    }

    #[test]
    fn names_gemini_refuses_and_repeats_are_left_out() {
        let declarations = gemini_declarations(&["list_dir", "list_dir", "9lives", "has space", &"x".repeat(65), ""]);
        assert_eq!(names(&declarations), ["list_dir"]);
    }
}
