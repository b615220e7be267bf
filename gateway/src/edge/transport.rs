//! Transport glue: `fetch` as the provider clients' HTTP transport, and calls to a team's
//! Durable Object.

use super::*;

pub(crate) struct FetchTransport;

impl HttpTransport for FetchTransport {
    async fn send(&self, req: HttpRequest) -> std::result::Result<HttpResponse, TransportError> {
        let headers = Headers::new();
        for (k, v) in &req.headers {
            headers.set(k, v).map_err(TransportError::of)?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::from(req.method.to_owned()))
            .with_headers(headers);
        if let Some(body) = &req.body {
            init.with_body(Some(
                worker::js_sys::Uint8Array::from(body.as_slice()).into(),
            ));
        }
        let request = Request::new_with_init(&req.url, &init).map_err(TransportError::of)?;
        let mut resp = Fetch::Request(request)
            .send()
            .await
            .map_err(TransportError::of)?;
        let status = resp.status_code();
        let headers = resp.headers().entries().collect();
        let body = resp.bytes().await.map_err(TransportError::of)?;
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    async fn sleep(&self, millis: u64) {
        worker::Delay::from(std::time::Duration::from_millis(millis)).await;
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }
}

// ---------------------------------------------------------------- team Durable Object calls

/// Asks team `team`'s Durable Object: its typed answer `A`, or its refusal
/// ([`GatewayError::Inventory`] with the status and why).
pub(crate) async fn team_call<A: serde::de::DeserializeOwned>(
    env: &Env,
    team: &str,
    request: inventory::Request,
) -> std::result::Result<A, GatewayError> {
    let transport = |e: worker::Error| GatewayError::Transport(e.to_string());
    let stub = env
        .durable_object(TEAM_BINDING)
        .and_then(|ns| ns.id_from_name(team)?.get_stub())
        .map_err(transport)?;
    let path = format!("https://team.internal/{}", request.name());
    let call = inventory::Call {
        team: team.to_owned(),
        request,
    };
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(call.encode().into()));
    let req = Request::new_with_init(&path, &init).map_err(transport)?;
    let mut resp = stub.fetch_with_request(req).await.map_err(transport)?;
    let status = resp.status_code();
    let bytes = resp.bytes().await.map_err(transport)?;
    if status == 200 {
        serde_json::from_slice(&bytes)
            .map_err(|e| GatewayError::Transport(format!("inventory answer: {e}")))
    } else {
        let message = serde_json::from_slice::<inventory::Refusal>(&bytes)
            .map_or_else(|_| "inventory error".to_owned(), |r| r.error);
        Err(GatewayError::Inventory { status, message })
    }
}
