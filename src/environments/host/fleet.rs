//! The `fleet` tool: the environments this machine drives, checked on request, and their removal
//! or revocation.

use super::*;

impl Inner {
    pub(super) async fn fleet(self: Arc<Self>, args: Value) -> Result<Value, ToolError> {
        let invalid = |message: &str| refusal(ErrorCode::InvalidArgs, message);
        if !args.is_object() {
            return Err(invalid("fleet takes an object: {\"action\":\"list\"|\"remove\"|\"revoke\", …}"));
        }
        let action = match args.get("action") {
            None | Some(Value::Null) => "list",
            Some(Value::String(action)) => action.as_str(),
            Some(_) => return Err(invalid("`action` must be \"list\", \"remove\" or \"revoke\"")),
        };
        if action == "list" {
            let probe = args.get("probe").and_then(Value::as_bool).unwrap_or(true);
            return self.fleet_list(probe).await;
        }
        if action != "remove" && action != "revoke" {
            return Err(invalid("`action` must be \"list\", \"remove\" or \"revoke\""));
        }
        // Pairing actions over a socket must present the host token (the phone never has it).
        let token = args.get("host_token").and_then(Value::as_str);
        store::authorize(self.home(), token).map_err(|_| {
            refusal(ErrorCode::HostTokenRequired, "pairing actions need this home's host token (`.host-token`)")
        })?;
        let Some(target) = args.get("target").and_then(Value::as_str).filter(|t| !t.is_empty()) else {
            return Err(invalid("`target` (envKey or name) is required"));
        };
        let token = token.unwrap_or_default();
        let home = self.home().clone();
        let (target_owned, token_owned) = (target.to_owned(), token.to_owned());
        let outcome = tokio::task::spawn_blocking(move || match action_of(&args) {
            "remove" => super::super::remove(&home, &target_owned, &token_owned)
                .map(|removed| json!({"removed": {"envKey": removed.env_key, "name": removed.name}})),
            _ => super::super::revoke(&home, &target_owned, &token_owned, "host-token")
                .map(|revoked| json!({"revoked": revoked.pairings, "alreadyRevoked": revoked.already})),
        })
        .await
        .map_err(|err| refusal(ErrorCode::Internal, format!("pairing action failed: {err}")))?;
        match outcome {
            Ok(value) => {
                if let Some(key) = value.pointer("/removed/envKey").and_then(Value::as_str) {
                    self.forget(key);
                }
                Ok(value)
            }
            Err(err) => Err(super::super::tool_error_of(&err)),
        }
    }

    pub(super) async fn fleet_list(self: Arc<Self>, probe: bool) -> Result<Value, ToolError> {
        let internal = |err: anyhow::Error| refusal(ErrorCode::Internal, format!("{err:#}"));
        let registry = store::load_registry(self.home()).map_err(internal)?;
        let checks = registry.environments.iter().map(|entry| {
            let this = self.clone();
            let entry = entry.clone();
            async move { this.describe(entry, probe).await }
        });
        let environments = futures_util::future::join_all(checks).await;
        Ok(json!({ "environments": environments }))
    }

    async fn describe(&self, entry: EnvEntry, probe: bool) -> Value {
        let mut out = json!({"name": entry.name, "envKey": entry.env_key});
        if entry.is_self {
            out["self"] = json!(true);
            out["state"] = json!("this machine");
            out["reachable"] = json!(true);
            return out;
        }
        out["relay"] = json!(entry.relay);
        let state = match self.resolve(&entry.env_key) {
            Err(error) => Err(error),
            Ok((_, Resolved::Local)) => Ok(()),
            Ok((_, Resolved::Remote(target))) if probe => {
                match tokio::time::timeout(PROBE_TIMEOUT, self.link(&target)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(error)) => Err(error),
                    Err(_) => Err(unreachable("no answer in time")),
                }
            }
            Ok(_) => Ok(()),
        };
        let paired = !matches!(&state, Err(e) if e.code == ErrorCode::EnvironmentNotPaired || e.code == ErrorCode::PairingRevoked);
        out["paired"] = json!(paired);
        match (state, self.connected(&entry.env_key)) {
            (Ok(()), Some(tools)) => {
                out["state"] = json!("connected");
                out["reachable"] = json!(true);
                out["connected"] = json!(true);
                out["tools"] = json!(tools);
            }
            (Ok(()), None) => {
                out["state"] = json!("idle");
                out["connected"] = json!(false);
            }
            (Err(error), _) => {
                out["state"] = json!(error.code.as_str());
                out["reachable"] = json!(false);
                out["connected"] = json!(false);
            }
        }
        out
    }
}

fn action_of(args: &Value) -> &str {
    args.get("action").and_then(Value::as_str).unwrap_or("list")
}
