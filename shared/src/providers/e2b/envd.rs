//! Commands through a sandbox's envd daemon (`process.Process/Start`): running one with
//! its input, output limit and deadline, killing one, and the request that starts it.

use super::*;

impl<T: HttpTransport> E2bClient<T> {
    /// Runs `cmd` with `args` (exec'd directly, no shell: pass `/bin/bash`, `["-l", "-c",
    /// line]` for a shell line, as the SDK does) through envd `process.Process/Start`.
    ///
    /// - `envs` are added to the sandbox's environment; `cwd` `None` = the user's home.
    /// - `stdin`: envd's Start only takes a "keep stdin open" flag (input would need separate
    ///   `SendInput`/`CloseStdin` calls while the stream is open, which a buffered transport
    ///   cannot do). So the process always starts with stdin closed, and non-empty input is
    ///   fed by running `/bin/bash -c <fixed script> e2b-stdin <n> <base64 chunks...> cmd
    ///   args...`: the script pipes the decoded chunks (`base64 -d`, coreutils) into
    ///   `exec cmd args...`. Nothing is interpolated into the script, so any bytes are safe;
    ///   the exit code is the program's. Input is limited to [`MAX_STDIN_BYTES`] (the
    ///   command line's size limit); more is refused with an `invalid_argument`
    ///   [`E2bError::Rpc`] before anything is sent.
    /// - `timeout_ms` goes to `Connect-Timeout-Ms` (0 = none); envd then ends the stream
    ///   with `deadline_exceeded` (in [`RunOutput::error`], exit code -1). The process may
    ///   keep running in the sandbox after that.
    /// - At most `output_limit` bytes of each of stdout and stderr are kept
    ///   ([`RunOutput::truncated`] says when more was dropped).
    ///
    /// Only 429s are retried (the command may have run otherwise). A stream that fails
    /// before the process started is an [`E2bError::Rpc`]; once it started, failures are
    /// reported in [`RunOutput::error`] along with the output so far.
    #[allow(clippy::too_many_arguments)] // the brief's signature: one call, all of a command
    pub async fn run(
        &self,
        sandbox: &Sandbox,
        cmd: &str,
        args: &[String],
        envs: &[(String, String)],
        cwd: Option<&str>,
        stdin: Option<&[u8]>,
        timeout_ms: u64,
        output_limit: usize,
    ) -> Result<RunOutput, E2bError> {
        let io = RunIo {
            stdin,
            timeout_ms,
            output_limit,
            tag: None,
        };
        self.run_tagged(sandbox, cmd, args, envs, cwd, io).await
    }

    /// [`E2bClient::run`] with the process tagged (`StartRequest.tag`), so that it can be
    /// killed by its tag ([`E2bClient::kill_tagged`]) before its pid is known.
    pub async fn run_tagged(
        &self,
        sandbox: &Sandbox,
        cmd: &str,
        args: &[String],
        envs: &[(String, String)],
        cwd: Option<&str>,
        io: RunIo<'_>,
    ) -> Result<RunOutput, E2bError> {
        let RunIo {
            stdin,
            timeout_ms,
            output_limit,
            tag,
        } = io;
        let wrapped = match stdin {
            Some(input) if input.len() > MAX_STDIN_BYTES => {
                return Err(E2bError::Rpc {
                    code: "invalid_argument".into(),
                    message: format!(
                        "stdin of {} bytes is over the {MAX_STDIN_BYTES}-byte limit for E2B \
                         commands: write the data to a file in the sandbox first",
                        input.len()
                    ),
                });
            }
            Some(input) if !input.is_empty() => Some(stdin_wrapper(cmd, args, input)),
            _ => None,
        };
        let (cmd, args) = match &wrapped {
            Some((c, a)) => (c.as_str(), a.as_slice()),
            None => (cmd, args),
        };
        let body = json_body(&StartRequestBody {
            process: ProcessConfigBody {
                cmd,
                args,
                envs: envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
                cwd,
            },
            stdin: false,
            tag,
        })?;
        let req = self.start_request(sandbox, connect_envelope(0, &body)?, timeout_ms)?;
        let token = sandbox.envd_access_token.as_deref();
        let resp = self
            .execute_with(req, false, Target::Envd { token })
            .await?;
        if !resp.is_success() {
            return Err(self.envd_error(&resp, &sandbox.sandbox_id, token));
        }
        let stream = parse_start_stream(&resp.body, output_limit).map_err(|e| {
            E2bError::Decode(self.redact(
                format!(
                    "command stream (HTTP {}): {e}; body starts {:?}",
                    resp.status,
                    excerpt(&resp.body)
                ),
                token,
            ))
        })?;
        self.run_output(stream, &resp, token)
    }

    /// Kills process `pid` in the sandbox (`process.Process/SendSignal`, SIGKILL; a unary
    /// Connect call with a plain JSON body). A process that is already gone is not an error.
    pub async fn kill_process(&self, sandbox: &Sandbox, pid: u32) -> Result<(), E2bError> {
        self.kill_selected(sandbox, ProcessSelector::Pid(pid)).await
    }

    /// Kills the process started with `tag` ([`E2bClient::run_tagged`]); one that is gone
    /// (or never started) is not an error.
    pub async fn kill_tagged(&self, sandbox: &Sandbox, tag: &str) -> Result<(), E2bError> {
        self.kill_selected(sandbox, ProcessSelector::Tag(tag)).await
    }

    pub(super) async fn kill_selected(
        &self,
        sandbox: &Sandbox,
        selector: ProcessSelector<'_>,
    ) -> Result<(), E2bError> {
        let body = serde_json::to_vec(&SendSignalBody {
            process: selector,
            signal: "SIGNAL_SIGKILL",
        })
        .map_err(|e| E2bError::Decode(e.to_string()))?;
        let mut req = self.start_request(sandbox, body, 0)?;
        req.url = req
            .url
            .replace("/process.Process/Start", "/process.Process/SendSignal");
        for (k, v) in &mut req.headers {
            if k.eq_ignore_ascii_case("content-type") {
                *v = "application/json".to_owned();
            }
        }
        req.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case("keepalive-ping-interval"));
        let token = sandbox.envd_access_token.as_deref();
        let resp = self.execute_with(req, true, Target::Envd { token }).await?;
        if resp.is_success() || resp.status == 404 {
            return Ok(());
        }
        Err(self.envd_error(&resp, &sandbox.sandbox_id, token))
    }

    // -- plumbing --------------------------------------------------------------------

    pub(super) fn run_output(
        &self,
        s: StartStream,
        resp: &HttpResponse,
        token: Option<&str>,
    ) -> Result<RunOutput, E2bError> {
        if !s.started && s.exit_code.is_none() {
            return Err(match s.stream_error {
                Some((code, message)) => E2bError::Rpc {
                    code,
                    message: self.redact(message, token),
                },
                None => E2bError::Decode(self.redact(
                    format!(
                        "the command stream (HTTP {}) ended before the process started; body \
                         starts {:?}",
                        resp.status,
                        excerpt(&resp.body)
                    ),
                    token,
                )),
            });
        }
        let error = match (&s.stream_error, &s.end_error, s.exit_code) {
            (Some((code, message)), _, _) => Some(format!("{code}: {message}")),
            (None, Some(e), _) => Some(e.clone()),
            (None, None, None) => Some(if s.finished {
                "the command stream ended without the process's end event".to_owned()
            } else {
                "the command stream was cut off before the process ended (connection lost?)"
                    .to_owned()
            }),
            (None, None, Some(_)) => None,
        };
        Ok(RunOutput {
            pid: s.pid,
            exit_code: s.exit_code.unwrap_or(-1),
            stdout: s.stdout,
            stderr: s.stderr,
            truncated: s.truncated,
            error: error.map(|e| self.redact(e, token)),
        })
    }

    pub(super) fn sandbox_path(&self, id: &str, suffix: &str) -> String {
        format!(
            "{}/sandboxes/{}{suffix}",
            self.api_url,
            encode_component(id)
        )
    }

    pub(super) fn api_request(
        &self,
        method: &'static str,
        url: String,
        body: Option<Vec<u8>>,
    ) -> HttpRequest {
        HttpRequest::json(method, url, ("X-API-Key", &self.api_key), body)
    }

    /// The sandbox domain when the sandbox names none: the API host without its `api.`
    /// prefix (`https://api.e2b.dev` → `e2b.dev`), else [`DEFAULT_DOMAIN`].
    pub(super) fn default_domain(&self) -> String {
        let rest = self
            .api_url
            .split_once("://")
            .map_or(self.api_url.as_str(), |(_, r)| r);
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        match host.strip_prefix("api.") {
            Some(domain) if !domain.is_empty() => domain.to_owned(),
            _ => DEFAULT_DOMAIN.to_owned(),
        }
    }

    /// `POST {envd}/process.Process/Start` with the Connect streaming headers.
    pub(super) fn start_request(
        &self,
        sandbox: &Sandbox,
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<HttpRequest, E2bError> {
        let (base, mut headers) = self.envd_base(sandbox)?;
        headers.push((
            "Content-Type".to_owned(),
            "application/connect+json".to_owned(),
        ));
        headers.push(("Connect-Protocol-Version".to_owned(), "1".to_owned()));
        if timeout_ms > 0 {
            headers.push(("Connect-Timeout-Ms".to_owned(), timeout_ms.to_string()));
        }
        headers.push((
            "Keepalive-Ping-Interval".to_owned(),
            KEEPALIVE_PING_INTERVAL_SECS.to_string(),
        ));
        Ok(HttpRequest {
            method: "POST",
            url: format!("{base}/process.Process/Start"),
            headers,
            body: Some(body),
        })
    }

    /// The sandbox's envd URL and the headers every envd request carries: the shared
    /// host's routing headers (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`) and the access token.
    pub(super) fn envd_base(
        &self,
        sandbox: &Sandbox,
    ) -> Result<(String, Vec<(String, String)>), E2bError> {
        let id = sandbox.sandbox_id.as_str();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(E2bError::NotFound(format!(
                "E2B sandbox {id:?} (not a valid sandbox ID)"
            )));
        }
        let mut headers = Vec::new();
        let base = match &self.sandbox_url {
            Some(url) => {
                headers.push(("E2b-Sandbox-Id".to_owned(), id.to_owned()));
                headers.push(("E2b-Sandbox-Port".to_owned(), ENVD_PORT.to_string()));
                url.clone()
            }
            None => {
                let domain = sandbox
                    .domain
                    .as_deref()
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map_or_else(|| self.default_domain(), str::to_owned);
                if !domain
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':'))
                {
                    return Err(E2bError::Decode(format!(
                        "the sandbox domain {domain:?} is not a host name"
                    )));
                }
                format!("https://{ENVD_PORT}-{id}.{domain}")
            }
        };
        if let Some(token) = sandbox
            .envd_access_token
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            headers.push(("X-Access-Token".to_owned(), token.to_owned()));
        }
        Ok((base, headers))
    }
}
