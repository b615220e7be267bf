//! The gateway's configuration, read once per isolate from Worker vars and secrets, and
//! where operations go: a provider the Worker reaches itself, or an executor's `/v1` API
//! (`Op::encode`, a cached HS256 token for that executor, the team and the caller).

use super::*;

pub(crate) const TEAM_BINDING: &str = "TEAM";
pub(crate) const DEFAULT_IDLE_SECS: u64 = 300;

/// One configured executor.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ExecutorCfg {
    pub(crate) name: String,
    pub(crate) url: String,
    /// What it can run computers on (default: docker).
    #[serde(default = "docker_only")]
    pub(crate) backends: Vec<String>,
    /// Takes no new computers (an operator is emptying it); its computers still answer.
    #[serde(default)]
    pub(crate) draining: bool,
}

pub(crate) fn docker_only() -> Vec<String> {
    vec!["docker".into()]
}

/// A provider the Worker talks to itself: configured, not configured, or misconfigured.
pub(crate) type CloudSlot<C> = std::result::Result<Option<Cloud<C>>, cloud::BadSetting>;

/// What every request needs, read from the environment.
pub(crate) struct Gateway {
    pub(crate) auth: std::result::Result<Auth, cloud::BadSetting>,
    pub(crate) executors: Vec<ExecutorCfg>,
    /// Fly Machines and E2B, reached directly (`cloud`).
    pub(crate) fly: CloudSlot<FlyComputers<FetchTransport>>,
    e2b: CloudSlot<E2bComputers<FetchTransport>>,
    /// Where new computers go (`PLACEMENT`, [`crate::placement`]), or why that cannot be
    /// decided.
    pub(crate) placement:
        std::result::Result<crate::placement::Placement, crate::placement::BadPlacement>,
    pub(crate) executor_secret: String,
    /// `TEAM_NETWORK`: each team's network policy (a bad value fails every request, like
    /// a bad auth setting).
    pub(crate) networks: crate::networks::TeamNetworks,
    /// `SESSION_TIMEOUT_SECS`, in ms.
    pub(crate) idle_ms: u64,
    pub(crate) dispatcher: Dispatcher,
}

impl Gateway {
    pub(crate) fn from_env(env: &Env) -> Self {
        let settings = Settings {
            static_token: var(env, "STATIC_TOKEN"),
            static_team: var(env, "STATIC_TEAM"),
            hs256_secret: var(env, "JWT_HS256_SECRET"),
            jwks: var(env, "JWT_JWKS"),
            issuer: var(env, "JWT_ISSUER"),
            audience: var(env, "JWT_AUDIENCE"),
            algorithms: var(env, "JWT_ALGORITHMS"),
            team_claim: var(env, "TEAM_CLAIM"),
            allow_unauthenticated_dev: var(env, "ALLOW_UNAUTHENTICATED_DEV").as_deref()
                == Some("true"),
        };
        let executors: Vec<ExecutorCfg> = var(env, "EXECUTORS")
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let read = |name: &str| var(env, name);
        let fly = cloud::fly_cfg(read).map(|c| c.map(|c| cloud::fly(&c, FetchTransport)));
        let e2b = cloud::e2b_cfg(read).map(|c| c.map(|c| cloud::e2b(&c, FetchTransport)));
        let offers: Vec<(&str, &[String])> = executors
            .iter()
            .map(|e| (e.name.as_str(), e.backends.as_slice()))
            .collect();
        let placement = crate::placement::parse(
            var(env, "PLACEMENT").as_deref(),
            &offers,
            matches!(fly, Ok(Some(_))),
            matches!(e2b, Ok(Some(_))),
        );
        let fixed = placement.as_ref().ok().and_then(|p| p.fixed());
        let what = match fixed.map(EdgePlace::of) {
            Some(EdgePlace::Fly) => "a Fly Machine",
            Some(EdgePlace::E2b) => "an E2B sandbox",
            _ => "a container on a self-hosted executor",
        };
        let exec_description = format!(
            "Run a command on an isolated Linux computer ({what}) and get its output. {}",
            usage_text(cloud::DEFAULT_TIMEOUT_SECS, cloud::OUTPUT_LIMIT as u64)
        );
        // `TOOLS` chooses the tool groups (SPEC §3.7); a bad value is answered on every
        // request, like a bad auth setting, never silently replaced.
        let tools = var(env, "TOOLS").unwrap_or_else(|| "exec,lifecycle".into());
        let groups = shared::catalogue::Groups::parse(&tools)
            .map_err(|e| cloud::BadSetting(format!("the TOOLS variable: {e}")))
            .and_then(served_here(&tools));
        let mut instructions = String::from(
            "Each computer is an isolated Linux machine with a stable id in your team. Run commands with the exec tool.",
        );
        let names = groups.clone().unwrap_or_default();
        if names.jobs {
            instructions.push_str(
                " For long-running commands pass `yield_ms`: one still running then becomes a job that terminal_job follows.",
            );
        }
        if names.files {
            instructions.push_str(
                " Move files as bytes with computer_file_read, computer_file_write and computer_file_edit (4 MiB per call).",
            );
        }
        instructions.push_str(&format!(" Tool groups: {}.", names.names().join(", ")));
        let networks = crate::networks::TeamNetworks::parse(var(env, "TEAM_NETWORK").as_deref());
        Self {
            auth: groups
                .and(networks.clone().map(|_| ()))
                .and_then(|_| Auth::new(&settings).map_err(|e| e.to_string().into())),
            networks: networks.unwrap_or_default(),
            executors,
            fly,
            e2b,
            placement,
            executor_secret: var(env, "EXECUTOR_SECRET").unwrap_or_default(),
            idle_ms: var(env, "SESSION_TIMEOUT_SECS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_IDLE_SECS)
                * 1000,
            dispatcher: Dispatcher::new(ServerConfig {
                name: "mcp-sandbox-computer-gateway".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                names: ToolNames::with_groups(EXEC_TOOL, names),
                exec_description,
                instructions: Some(instructions),
                dashboard_html: Some(shared::dashboard::HTML.into()),
                // Over jobs, with each task's record in the team's object (`edge::tasks`).
                tasks: true,
            }),
        }
    }

    pub(crate) fn executor(&self, name: &str) -> Option<&ExecutorCfg> {
        self.executors.iter().find(|e| e.name == name)
    }

    /// Why `place` cannot take computers now (a provider without valid configuration).
    pub(crate) fn unusable(&self, place: &str) -> Option<GatewayError> {
        match EdgePlace::of(place) {
            EdgePlace::Fly => slot(&self.fly, place).err(),
            EdgePlace::E2b => slot(&self.e2b, place).err(),
            EdgePlace::Executor(_) => None,
        }
    }

    /// Does one operation where `place` says: on a provider directly, or through the
    /// executor API of the executor of that name, with a token for `owner` (the caller,
    /// whose temporaries the executor keeps to it) granting `scope` (the caller's, space
    /// separated: the executor checks it again). Failures keep their codes.
    pub(crate) async fn op(
        &self,
        place: &str,
        team: &str,
        owner: &str,
        scope: &str,
        op: Op,
    ) -> std::result::Result<Answer, GatewayError> {
        op.named().map_err(GatewayError::Api)?;
        let answer = match EdgePlace::of(place) {
            EdgePlace::Fly => slot(&self.fly, place)?.handle(team, op).await,
            EdgePlace::E2b => slot(&self.e2b, place)?.handle(team, op).await,
            EdgePlace::Executor(name) => {
                let grant = exec_token::Grant {
                    executor: name,
                    team,
                    owner,
                    scope,
                };
                return self.call(grant, &op).await;
            }
        };
        answer.map_err(GatewayError::Api)
    }

    /// One slice of `GET /v1/files` on a computer placed directly on Fly or E2B.
    pub(crate) async fn direct_file_slice(
        &self,
        place: &str,
        team: &str,
        id: &str,
        path: &str,
        offset: u64,
    ) -> std::result::Result<shared::files::Slice, GatewayError> {
        let slice = match EdgePlace::of(place) {
            EdgePlace::Fly => {
                slot(&self.fly, place)?
                    .file_slice(team, id, path, offset)
                    .await
            }
            EdgePlace::E2b => {
                slot(&self.e2b, place)?
                    .file_slice(team, id, path, offset)
                    .await
            }
            EdgePlace::Executor(name) => return Err(through_executor(name)),
        };
        slice.map_err(GatewayError::Api)
    }

    /// `PUT /v1/files` on a computer placed directly on Fly or E2B.
    pub(crate) async fn direct_file_put<S>(
        &self,
        place: &str,
        team: &str,
        id: &str,
        path: &str,
        how: shared::files::PutQuery,
        body: S,
    ) -> std::result::Result<WriteAnswer, GatewayError>
    where
        S: futures_util::Stream<Item = std::result::Result<Vec<u8>, shared::files::BrokenStream>>
            + Unpin,
    {
        let written = match EdgePlace::of(place) {
            EdgePlace::Fly => {
                slot(&self.fly, place)?
                    .file_put(team, id, path, how, body)
                    .await
            }
            EdgePlace::E2b => {
                slot(&self.e2b, place)?
                    .file_put(team, id, path, how, body)
                    .await
            }
            EdgePlace::Executor(name) => return Err(through_executor(name)),
        };
        written.map_err(GatewayError::Api)
    }

    /// Sends `op` to the executor `grant` names, with a token for it (its `aud` is that
    /// executor's name): the success body, or the executor's error.
    pub(crate) async fn call(
        &self,
        grant: exec_token::Grant<'_>,
        op: &Op,
    ) -> std::result::Result<Answer, GatewayError> {
        let executor = grant.executor;
        let ex = self.executor(executor).ok_or_else(|| {
            GatewayError::Config(format!(
                "executor {executor:?} is not configured on this gateway"
            ))
        })?;
        let token = exec_token::token(&self.executor_secret, grant, now_ms() / 1000)
            .map_err(|e| GatewayError::Config(e.to_string()))?;
        let request = op.encode();
        let transport = |e: worker::Error| GatewayError::Transport(e.to_string());
        let headers = Headers::new();
        headers
            .set("content-type", "application/json")
            .map_err(transport)?;
        headers
            .set("authorization", &format!("Bearer {token}"))
            .map_err(transport)?;
        let mut init = RequestInit::new();
        init.with_method(Method::from(request.method.to_owned()))
            .with_headers(headers);
        if let Some(b) = &request.body {
            init.with_body(Some(b.as_str().into()));
        }
        let url = format!(
            "{}{}{}",
            ex.url.trim_end_matches('/'),
            shared::executor_api::PREFIX,
            request.path
        );
        let req = Request::new_with_init(&url, &init).map_err(transport)?;
        let mut resp = match Fetch::Request(req).send().await {
            Ok(r) => r,
            Err(e) => {
                let detail = e.to_string();
                self.unreachable(executor, &detail);
                return Err(GatewayError::Unreachable {
                    executor: executor.to_owned(),
                    detail,
                });
            }
        };
        let status = resp.status_code();
        let text = resp.text().await.map_err(transport)?;
        if status == 200 {
            return Answer::decode(op.answer_kind(), &text)
                .map_err(|e| GatewayError::Transport(format!("executor answer: {e}")));
        }
        Err(GatewayError::Api(
            serde_json::from_str::<ApiError>(&text).unwrap_or_else(|_| {
                ApiError::new(
                    ErrorCode::Engine,
                    format!("executor {executor:?} answered {status}"),
                )
            }),
        ))
    }
}

/// A direct file call on a computer an executor holds: its files stream through it.
fn through_executor(name: &str) -> GatewayError {
    GatewayError::Config(format!(
        "computer files on executor {name:?} stream through the executor, not the Worker"
    ))
}

/// The provider of a slot, or what to set to configure it.
pub(crate) fn slot<'a, C>(
    s: &'a CloudSlot<C>,
    place: &str,
) -> std::result::Result<&'a Cloud<C>, GatewayError> {
    match s {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(GatewayError::Config(format!(
            "{place} is not configured on this gateway ({} as Worker secrets/vars)",
            match EdgePlace::of(place) {
                EdgePlace::Fly => "set FLY_API_TOKEN and FLY_APP_NAME",
                _ => "set E2B_API_KEY",
            }
        ))),
        Err(e) => Err(GatewayError::Config(e.to_string())),
    }
}

pub(crate) fn gateway(env: &Env) -> Rc<Gateway> {
    GATEWAY.with(|g| {
        g.borrow_mut()
            .get_or_insert_with(|| Rc::new(Gateway::from_env(env)))
            .clone()
    })
}

/// The groups the gateway serves of `groups` (`TOOLS`): snapshots are kept by local
/// servers and executors only so far (issue 39), so `all` leaves them out and naming them
/// is refused.
fn served_here(
    tools: &str,
) -> impl FnOnce(shared::catalogue::Groups) -> Result<shared::catalogue::Groups, cloud::BadSetting> + '_
{
    move |mut groups| {
        let named = tools
            .split(',')
            .any(|g| g.trim().eq_ignore_ascii_case("snapshots"));
        if named {
            return Err(cloud::BadSetting(
                "the TOOLS variable: the gateway does not serve the snapshots group yet; leave it out (local servers and executors serve it)".into(),
            ));
        }
        groups.snapshots = false;
        Ok(groups)
    }
}
