//! `GET` / `PUT /v1/files/{computer_id}/{path}` at the edge (SPEC §3.9): the caller's JWT
//! and the team's inventory decide, then the bytes stream between the client and the
//! executor that holds the computer, never buffered in the Worker (its memory stays flat
//! whatever the size; the executor enforces its `--file-limit`).
//!
//! The owner is the legacy session named by `Mcp-Session-Id`, else the JWT's user, as
//! for the tools. A download needs a computer the caller may see; an upload claims it like
//! a first tool call (`?temporary=false` for a permanent one).
//!
//! Computers placed directly on Fly or E2B have no executor to stream to: the Worker moves
//! their files itself through `shared::files::over_exec` (E2B's big slices through envd's
//! file API), one slice in memory at a time. A download streams 4 MiB slices out as they
//! are read (`Range` is not served there: the answer is the whole file, 200); an upload
//! stages the body's chunks beside the target and renames at its end.

use super::*;

fn error(status: u16, message: impl Into<String>) -> Result<Response> {
    refusal(status, &message.into())
}

fn status_of(e: &GatewayError) -> u16 {
    match e {
        GatewayError::Inventory { status, .. } => *status,
        GatewayError::Scope { .. } => 403,
        GatewayError::Api(a) => a.error.code.http_status(),
        _ => 502,
    }
}

/// The route, after the origin check: auth, the inventory, then the executor's stream.
pub(crate) async fn files(
    req: Request,
    env: &Env,
    gw: Rc<Gateway>,
    origin: &str,
    rest: &str,
    query: Option<&str>,
) -> Result<Response> {
    if !gw.dispatcher.config().names.files {
        return error(
            404,
            "/v1/files belongs to the files tool group, which this gateway does not serve (its TOOLS variable)",
        );
    }
    let (method, put) = match req.method() {
        Method::Get => ("GET", false),
        Method::Put => ("PUT", true),
        _ => {
            let r = error(405, "/v1/files takes GET (download) or PUT (upload)")?;
            r.headers().set("allow", "GET, PUT")?;
            return Ok(r);
        }
    };
    let auth = match &gw.auth {
        Ok(a) => a,
        Err(e) => return error(500, format!("gateway configuration: {e}")),
    };
    let authorization = req.headers().get("authorization")?;
    let caller = match auth.check(authorization.as_deref(), now_ms() / 1000) {
        Ok(c) => c,
        Err(e) => return routes::unauthorized(origin, &e),
    };
    if !caller.can_exec {
        return error(403, "reading and writing files needs the `exec` scope");
    }
    let Some((id, file)) = rest.split_once('/') else {
        return error(400, "the route is /v1/files/{computer_id}/{path}");
    };
    if let Err(e) = shared::ids::validate_computer_id(id) {
        return error(400, e.to_string());
    }
    if let Err(e) = shared::files::validate_path(&format!("/{file}")) {
        return error(400, e.to_string());
    }
    let team = caller.team.clone();
    let sid = req.headers().get("mcp-session-id")?;
    let (owner, default) = match &sid {
        Some(sid) => {
            let get = inventory::Request::SessionGet {
                sid: sid.clone(),
                subject: caller.subject.clone(),
            };
            let found = team_call::<inventory::Session>(env, &team, get).await;
            match found {
                Ok(s) => (format!("session:{sid}"), s.default_id),
                Err(GatewayError::Inventory { status: 404, .. }) => {
                    return error(
                        404,
                        "unknown Mcp-Session-Id: the session ended or never existed; start a new one, or send no session header",
                    );
                }
                Err(e) => return error(502, e.to_string()),
            }
        }
        None => (format!("user:{}", caller.subject), None),
    };
    let host = Host {
        gw: gw.clone(),
        env: env.clone(),
        caller,
        owner,
        session: sid,
        default: RefCell::new(default),
    };
    // The executor reads the same query with the same parser: one reading, and a repeated
    // or unknown name is a 400 here before anything is claimed.
    let temporary = match put {
        true => match shared::files::PutQuery::parse(query.unwrap_or_default()) {
            Ok(q) => q.temporary,
            Err(e) => return error(400, e.to_string()),
        },
        false => None,
    };
    let placed = if put {
        host.target(Some(id), temporary).await.map(|(_, r)| r)
    } else {
        host.visible(id).await
    };
    let rec = match placed {
        Ok(r) => r,
        Err(e) => return error(status_of(&e), e.to_string()),
    };
    if EdgePlace::of(&rec.executor).is_direct() {
        let path = format!("/{}", shared::files::percent_decoded(file));
        if let Err(e) = shared::files::validate_path(&path) {
            return error(400, e.to_string());
        }
        let answer = if put {
            direct_put(req, &gw, &rec.executor, &team, id, &path, query, temporary).await
        } else {
            direct_get(gw.clone(), &rec.executor, &team, id, &path).await
        };
        if put
            && answer.as_ref().is_ok_and(|r| r.status_code() < 300)
            && touch_due(&team, id, gw.idle_ms / 4)
        {
            let _ = touch(env, &team, id).await;
        }
        return answer;
    }
    let Some(ex) = gw.executor(&rec.executor) else {
        return error(
            502,
            format!(
                "executor {:?} is not configured on this gateway",
                rec.executor
            ),
        );
    };
    let grant = exec_token::Grant {
        executor: &ex.name,
        team: &team,
        owner: &host.owner,
        // The caller's scopes: the executor refuses a new permanent computer without
        // `manage`, as the team's object did.
        scope: &host.scope(),
    };
    let token = match exec_token::token(&gw.executor_secret, grant, now_ms() / 1000) {
        Ok(t) => t,
        Err(e) => return error(500, e.to_string()),
    };
    let headers = Headers::new();
    headers.set("authorization", &format!("Bearer {token}"))?;
    for name in ["range", "content-length", "content-type"] {
        if let Some(v) = req.headers().get(name)? {
            headers.set(name, &v)?;
        }
    }
    let mut init = RequestInit::new();
    init.with_method(Method::from(method.to_owned()))
        .with_headers(headers);
    if put {
        // The client's body, handed on as a stream.
        init.with_body(req.inner().body().map(Into::into));
    }
    let url = format!(
        "{}/v1/files/{id}/{file}{}",
        ex.url.trim_end_matches('/'),
        query.map(|q| format!("?{q}")).unwrap_or_default()
    );
    let forwarded = Request::new_with_init(&url, &init)?;
    match Fetch::Request(forwarded).send().await {
        // The executor's answer, its body streamed through.
        Ok(resp) => {
            if put && resp.status_code() < 300 && touch_due(&team, id, gw.idle_ms / 4) {
                let _ = touch(env, &team, id).await;
            }
            Ok(resp)
        }
        Err(e) => error(502, format!("executor {:?} unreachable: {e}", rec.executor)),
    }
}

/// Records a use of `id` in the team's object.
async fn touch(env: &Env, team: &str, id: &str) -> std::result::Result<(), GatewayError> {
    let touch = inventory::Request::Touch {
        id: id.to_owned(),
        busy: None,
        done: None,
    };
    team_call::<inventory::Done>(env, team, touch)
        .await
        .map(|_| ())
}

fn api_error(e: &GatewayError) -> Result<Response> {
    error(status_of(e), e.to_string())
}

/// `GET /v1/files` on a computer placed directly on Fly or E2B: the first slice is read
/// before answering (so a missing file or a directory gets its status), the rest stream
/// out a slice at a time.
async fn direct_get(
    gw: Rc<Gateway>,
    place: &str,
    team: &str,
    id: &str,
    path: &str,
) -> Result<Response> {
    use futures_util::StreamExt;
    let first = match gw.direct_file_slice(place, team, id, path, 0).await {
        Ok(s) => s,
        Err(e) => return api_error(&e),
    };
    let size = first.size;
    let mut offset = first.data.len() as u64;
    let done = first.data.is_empty() || offset >= size;
    let (place, team, id, path) = (
        place.to_owned(),
        team.to_owned(),
        id.to_owned(),
        path.to_owned(),
    );
    let head = futures_util::stream::iter([Ok::<Vec<u8>, worker::Error>(first.data)]);
    let rest = futures_util::stream::unfold(done, move |done| {
        let (gw, place, team, id, path) = (
            gw.clone(),
            place.clone(),
            team.clone(),
            id.clone(),
            path.clone(),
        );
        async move {
            if done {
                return None;
            }
            match gw
                .direct_file_slice(&place, &team, &id, &path, offset)
                .await
            {
                Ok(s) => {
                    offset += s.data.len() as u64;
                    let end = s.data.is_empty() || offset >= s.size;
                    Some((Ok(s.data), end))
                }
                // The status is sent: cut the body, so the client sees a short read.
                Err(e) => Some((Err(worker::Error::RustError(e.to_string())), true)),
            }
        }
    });
    let resp = Response::from_stream(head.chain(rest))?;
    resp.headers()
        .set("content-type", "application/octet-stream")?;
    resp.headers().set("x-file-size", &size.to_string())?;
    Ok(resp)
}

/// `PUT /v1/files` on a computer placed directly on Fly or E2B (the query's `mode`,
/// `create_only`, `make_dirs`, `temporary`).
#[allow(clippy::too_many_arguments)] // the route's parts, each used once
async fn direct_put(
    mut req: Request,
    gw: &Gateway,
    place: &str,
    team: &str,
    id: &str,
    path: &str,
    query: Option<&str>,
    temporary: Option<bool>,
) -> Result<Response> {
    use futures_util::StreamExt;
    let how = match shared::files::PutQuery::parse(query.unwrap_or_default()) {
        Ok(q) => shared::files::PutQuery {
            temporary: q.temporary.or(temporary),
            ..q
        },
        Err(e) => return error(400, e.to_string()),
    };
    let body = Box::pin(
        req.stream()?
            .map(|r| r.map_err(|e| shared::files::BrokenStream(e.to_string()))),
    );
    match gw.direct_file_put(place, team, id, path, how, body).await {
        Ok(w) => json_response(201, &Answer::Written(w).to_value()),
        Err(e) => api_error(&e),
    }
}
