//! What an analyst installs to work with dpgate:
//!
//! - [`Client`]: a typed client for every route of the API. Problem
//!   documents come back as [`ClientError::Problem`], so callers can match
//!   on their stable type; idempotent calls are retried, releases under an
//!   `Idempotency-Key` so that a retry never spends budget twice.
//! - [`trainer`]: the label-blind WALR trainer, and [`walr_training`]
//!   the flow around it (features, release, fit) the CLI and the Python
//!   package share.
//! - [`features`], [`mapped`], [`model_file`], [`evaluate`], [`predict`]:
//!   feature tables, a release's feature map applied to them, the model
//!   file, its evaluation on labelled data and its predictions.
//! - [`cli`]: the `dpgate-client` command line.

// Production functions stay short enough to read (clippy.toml: 120
// lines); tests may spell a scenario out at length.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use dpgate_api_types::{
    BudgetChange, CreateDataset, Dataset, DatasetList, GradientCall, GradientCallResult,
    IDEMPOTENCY_KEY, IngestReport, LedgerEntry, LedgerPage, LedgerVerification, PROBLEM_JSON,
    PrivacyProfile, Problem, ProblemType, Registration, Release, ReleaseList, ReleaseRequest,
};
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use uuid::Uuid;

pub use dpgate_api_types as types;

pub mod cli;
pub mod evaluate;
pub mod features;
pub mod lasso;
pub mod mapped;
pub mod model_file;
pub mod predict;
pub mod trainer;
pub mod walr_training;

/// Tries of an idempotent call.
const ATTEMPTS: u32 = 4;
/// The wait before the first retry; it doubles each time.
const BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait a server's `Retry-After` may ask for.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Answers that say "try again shortly".
const RETRY_STATUSES: [StatusCode; 4] = [
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a problem document.
    #[error("{} ({}): {}", .0.title, .0.status, .0.detail)]
    Problem(Box<Problem>),
    /// The request did not complete.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    /// The server answered something this client does not understand.
    #[error("unexpected response {status}: {body}")]
    Unexpected { status: StatusCode, body: String },
}

impl ClientError {
    /// The problem type, if the server sent one of dpgate's.
    pub fn problem_type(&self) -> Option<ProblemType> {
        match self {
            ClientError::Problem(problem) => problem.kind(),
            _ => None,
        }
    }
}

/// `request` asking to be answered before its work is done (RFC 7240).
fn in_background(request: RequestBuilder) -> RequestBuilder {
    request.header("prefer", dpgate_api_types::RESPOND_ASYNC)
}

/// The row upload formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadFormat {
    Csv,
    Ndjson,
    /// An Arrow IPC stream.
    ArrowStream,
    Parquet,
}

/// Options of a release call.
#[derive(Debug, Clone, Default)]
pub struct ReleaseOptions {
    /// Makes retries safe: the same key and body return the stored release.
    pub idempotency_key: Option<String>,
    /// Price the release without spending anything.
    pub dry_run: bool,
}

/// A release and whether it was a replay of an earlier one.
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    pub release: Release,
    /// True when the server returned a stored release (HTTP 200).
    pub replayed: bool,
}

/// A dpgate API client.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// How long the client waits on a server, so that a hung one cannot hang
/// it: each try of a request gives up after these (and is retried like a
/// dropped connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To open a connection.
    pub connect: Duration,
    /// For a whole answer: longer than the server's own request timeout
    /// (5 minutes by default), so that its 503 comes first.
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            request: Duration::from_secs(330),
        }
    }
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:8080`)
    /// with the default [`Timeouts`].
    pub fn new(base_url: &str, token: Option<String>) -> Self {
        Self::with_timeouts(base_url, token, Timeouts::default())
    }

    /// [`Client::new`] with other timeouts.
    pub fn with_timeouts(base_url: &str, token: Option<String>, timeouts: Timeouts) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .timeout(timeouts.request)
            .build()
            .unwrap_or_default();
        Client {
            base: base_url.trim_end_matches('/').to_owned(),
            token,
            http,
        }
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token sent, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The same server with another token.
    pub fn with_token(&self, token: &str) -> Self {
        Client {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn problem_or<T: DeserializeOwned>(
        response: Response,
    ) -> Result<(StatusCode, T), ClientError> {
        let status = response.status();
        let is_problem = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with(PROBLEM_JSON));
        let body = response.text().await?;
        if is_problem && let Ok(problem) = serde_json::from_str::<Problem>(&body) {
            return Err(ClientError::Problem(Box::new(problem)));
        }
        if status.is_success()
            && let Ok(value) = serde_json::from_str(&body)
        {
            return Ok((status, value));
        }
        Err(ClientError::Unexpected { status, body })
    }

    /// Sends a request that may safely be repeated, retrying when the
    /// connection failed or the server was briefly unavailable (429, 502,
    /// 503, 504) with exponential backoff. A body that can not be replayed
    /// (a stream) is sent once.
    async fn send_idempotent(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        let mut attempt = 0;
        loop {
            let Some(retry) = request.try_clone().filter(|_| attempt + 1 < ATTEMPTS) else {
                return Ok(request.send().await?);
            };
            let wait = BACKOFF * 2u32.pow(attempt);
            match retry.send().await {
                Ok(response) if RETRY_STATUSES.contains(&response.status()) => {
                    let asked = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|value| value.to_str().ok())
                        .and_then(|value| value.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    tokio::time::sleep(asked.unwrap_or(wait).min(MAX_WAIT)).await;
                }
                Ok(response) => return Ok(response),
                Err(error) if error.is_connect() || error.is_timeout() || error.is_request() => {
                    tokio::time::sleep(wait).await;
                }
                Err(error) => return Err(error.into()),
            }
            attempt += 1;
        }
    }

    /// An idempotent call (GET), retried as [`Client::send_idempotent`].
    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, ClientError> {
        Ok(Self::problem_or(self.send_idempotent(request).await?)
            .await?
            .1)
    }

    /// A call that changes state and is sent exactly once.
    async fn call_once<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
    ) -> Result<T, ClientError> {
        Ok(Self::problem_or(request.send().await?).await?.1)
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<(), ClientError> {
        self.call::<serde_json::Value>(self.request(Method::GET, "/healthz"))
            .await
            .map(drop)
    }

    /// `POST /v1/datasets`.
    pub async fn create_dataset(&self, request: &CreateDataset) -> Result<Dataset, ClientError> {
        self.call_once(self.request(Method::POST, "/v1/datasets").json(request))
            .await
    }

    /// `GET /v1/datasets`.
    pub async fn datasets(&self) -> Result<Vec<Dataset>, ClientError> {
        let list: DatasetList = self.call(self.request(Method::GET, "/v1/datasets")).await?;
        Ok(list.datasets)
    }

    /// `GET /v1/datasets/{id}`.
    pub async fn dataset(&self, id: Uuid) -> Result<Dataset, ClientError> {
        self.call(self.request(Method::GET, &format!("/v1/datasets/{id}")))
            .await
    }

    /// `POST /v1/datasets/{id}/rows`.
    pub async fn upload_rows(
        &self,
        id: Uuid,
        format: UploadFormat,
        body: impl Into<reqwest::Body>,
    ) -> Result<IngestReport, ClientError> {
        let media = match format {
            UploadFormat::Csv => dpgate_api_types::CSV,
            UploadFormat::Ndjson => dpgate_api_types::NDJSON,
            UploadFormat::ArrowStream => dpgate_api_types::ARROW_STREAM,
            UploadFormat::Parquet => dpgate_api_types::PARQUET,
        };
        let request = self
            .request(Method::POST, &format!("/v1/datasets/{id}/rows"))
            .header(reqwest::header::CONTENT_TYPE, media)
            .body(body);
        self.call_once(request).await
    }

    /// `POST /v1/datasets/{id}/rows` naming a `source`: registers Parquet
    /// files in place (under the server's `DPGATE_DATA_ROOTS`) as the
    /// dataset's next version.
    pub async fn register_rows(
        &self,
        id: Uuid,
        source: &dpgate_api_types::Source,
    ) -> Result<IngestReport, ClientError> {
        self.call_once(self.registering(id, source)).await
    }

    fn registering(&self, id: Uuid, source: &dpgate_api_types::Source) -> RequestBuilder {
        let body = dpgate_api_types::RegisterRows {
            source: source.clone(),
        };
        self.request(Method::POST, &format!("/v1/datasets/{id}/rows"))
            .json(&body)
    }

    /// `POST /v1/datasets` with a `source`, registered in the background
    /// (`Prefer: respond-async`): the registration, to follow with
    /// [`Client::registration`] or [`Client::registered`].
    pub async fn create_dataset_in_background(
        &self,
        request: &CreateDataset,
    ) -> Result<Registration, ClientError> {
        let request = self.request(Method::POST, "/v1/datasets").json(request);
        self.call_once(in_background(request)).await
    }

    /// `POST /v1/datasets/{id}/rows` naming a `source`, registered in the
    /// background (`Prefer: respond-async`).
    pub async fn register_rows_in_background(
        &self,
        id: Uuid,
        source: &dpgate_api_types::Source,
    ) -> Result<Registration, ClientError> {
        self.call_once(in_background(self.registering(id, source)))
            .await
    }

    /// `GET /v1/registrations/{id}`.
    pub async fn registration(&self, id: Uuid) -> Result<Registration, ClientError> {
        self.call(self.request(Method::GET, &format!("/v1/registrations/{id}")))
            .await
    }

    /// Waits for registration `id` to end, asking every `poll`: what it
    /// added, or the problem it failed with.
    pub async fn registered(&self, id: Uuid, poll: Duration) -> Result<IngestReport, ClientError> {
        loop {
            let registration = self.registration(id).await?;
            match (registration.report, registration.problem) {
                (Some(report), _) => return Ok(report),
                (None, Some(problem)) => return Err(ClientError::Problem(Box::new(problem))),
                (None, None) => tokio::time::sleep(poll).await,
            }
        }
    }

    /// `POST /v1/datasets/{id}/releases`. A release is always sent with an
    /// `Idempotency-Key` (a fresh one unless `options` gives one), so that
    /// the retries after a lost connection can never spend budget twice:
    /// the server answers a repeat with the stored release.
    pub async fn release(
        &self,
        id: Uuid,
        request: &ReleaseRequest,
        options: &ReleaseOptions,
    ) -> Result<Released, ClientError> {
        let mut builder = self
            .request(Method::POST, &format!("/v1/datasets/{id}/releases"))
            .query(&[("dry_run", options.dry_run)])
            .json(request);
        if !options.dry_run {
            let key = options
                .idempotency_key
                .clone()
                .unwrap_or_else(|| Uuid::new_v4().to_string());
            builder = builder.header(IDEMPOTENCY_KEY, key);
        }
        let response = self.send_idempotent(builder).await?;
        let (status, release) = Self::problem_or(response).await?;
        Ok(Released {
            release,
            replayed: status == StatusCode::OK && !options.dry_run,
        })
    }

    /// Call `call` of gradient session `release` on dataset `id`: the
    /// noisy gradient at `theta`. A retry of the same call and θ gets the
    /// stored answer, so it is sent with the idempotent retries.
    pub async fn gradient_call(
        &self,
        id: Uuid,
        release: Uuid,
        call: &GradientCall,
    ) -> Result<GradientCallResult, ClientError> {
        let builder = self
            .request(
                Method::POST,
                &format!("/v1/datasets/{id}/releases/{release}/calls"),
            )
            .json(call);
        let response = self.send_idempotent(builder).await?;
        Ok(Self::problem_or(response).await?.1)
    }

    /// `GET /v1/datasets/{id}/releases/{release}`.
    pub async fn get_release(&self, id: Uuid, release: Uuid) -> Result<Release, ClientError> {
        self.call(self.request(
            Method::GET,
            &format!("/v1/datasets/{id}/releases/{release}"),
        ))
        .await
    }

    /// One page of `GET /v1/datasets/{id}/releases`: every release for an
    /// admin (or one `analyst`'s), the caller's own for an analyst.
    pub async fn releases_page(
        &self,
        id: Uuid,
        analyst: Option<&str>,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> Result<ReleaseList, ClientError> {
        let mut request = self.request(Method::GET, &format!("/v1/datasets/{id}/releases"));
        if let Some(analyst) = analyst {
            request = request.query(&[("analyst", analyst)]);
        }
        self.call(Self::page(request, after, limit)).await
    }

    /// `PATCH /v1/datasets/{id}/budget` (admins).
    pub async fn change_budget(
        &self,
        id: Uuid,
        change: &BudgetChange,
    ) -> Result<Dataset, ClientError> {
        self.call_once(
            self.request(Method::PATCH, &format!("/v1/datasets/{id}/budget"))
                .json(change),
        )
        .await
    }

    /// `GET /v1/datasets/{id}/features` as CSV (`row_id,<features…>`, in
    /// the units they were uploaded in), calling `progress` with the bytes
    /// received so far.
    pub async fn features_csv(
        &self,
        id: Uuid,
        progress: impl FnMut(u64),
    ) -> Result<Vec<u8>, ClientError> {
        self.features(id, dpgate_api_types::CSV, progress).await
    }

    /// `GET /v1/datasets/{id}/features` as an Arrow IPC stream (`row_id`,
    /// then a Float32 column per feature in the units they were uploaded
    /// in; [`features::FeatureTable::from_arrow`] reads it), calling
    /// `progress` with the bytes received so far.
    pub async fn features_arrow(
        &self,
        id: Uuid,
        progress: impl FnMut(u64),
    ) -> Result<Vec<u8>, ClientError> {
        self.features(id, dpgate_api_types::ARROW_STREAM, progress)
            .await
    }

    /// `GET /v1/datasets/{id}/features` as `media`, whole.
    async fn features(
        &self,
        id: Uuid,
        media: &str,
        mut progress: impl FnMut(u64),
    ) -> Result<Vec<u8>, ClientError> {
        let request = self
            .request(Method::GET, &format!("/v1/datasets/{id}/features"))
            .header(reqwest::header::ACCEPT, media);
        let response = self.send_idempotent(request).await?;
        if !response.status().is_success() {
            let (status, value) = Self::problem_or::<serde_json::Value>(response).await?;
            return Err(ClientError::Unexpected {
                status,
                body: value.to_string(),
            });
        }
        // A server that does not know the format answers in its default
        // one; reading that as the format asked for would fail obscurely.
        let sent = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if !sent.starts_with(media) {
            return Err(ClientError::Unexpected {
                status: response.status(),
                body: format!("asked for the features as {media}, the server sent {sent:?}"),
            });
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = futures_util::StreamExt::next(&mut chunks).await {
            body.extend_from_slice(&chunk?);
            progress(body.len() as u64);
        }
        Ok(body)
    }

    /// `GET /metrics`: Prometheus text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let response = self
            .send_idempotent(self.request(Method::GET, "/metrics"))
            .await?;
        let status = response.status();
        let body = response.text().await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(ClientError::Unexpected { status, body })
        }
    }

    fn page(request: RequestBuilder, after: Option<u64>, limit: Option<u32>) -> RequestBuilder {
        let request = match after {
            Some(after) => request.query(&[("after", after)]),
            None => request,
        };
        match limit {
            Some(limit) => request.query(&[("limit", limit)]),
            None => request,
        }
    }

    /// One page of `GET /v1/datasets/{id}/ledger`.
    pub async fn ledger_page(
        &self,
        id: Uuid,
        after: Option<u64>,
        limit: Option<u32>,
    ) -> Result<LedgerPage, ClientError> {
        let request = self.request(Method::GET, &format!("/v1/datasets/{id}/ledger"));
        self.call(Self::page(request, after, limit)).await
    }

    /// `POST /v1/datasets/{id}/ledger/verify`: the chain walked by the
    /// server (admins).
    pub async fn verify_ledger(&self, id: Uuid) -> Result<LedgerVerification, ClientError> {
        let path = format!("/v1/datasets/{id}/ledger/verify");
        self.call(self.request(Method::POST, &path)).await
    }

    /// `GET /v1/datasets/{id}/privacy-profile`: ε at each of `deltas` (the
    /// server's default grid when empty).
    pub async fn privacy_profile(
        &self,
        id: Uuid,
        deltas: &[f64],
    ) -> Result<PrivacyProfile, ClientError> {
        let path = format!("/v1/datasets/{id}/privacy-profile");
        let mut request = self.request(Method::GET, &path);
        if !deltas.is_empty() {
            let list: Vec<String> = deltas.iter().map(f64::to_string).collect();
            request = request.query(&[("deltas", list.join(","))]);
        }
        self.call(request).await
    }

    /// The whole ledger, following pages.
    pub async fn ledger(&self, id: Uuid) -> Result<Vec<LedgerEntry>, ClientError> {
        let mut entries = Vec::new();
        let mut after = None;
        loop {
            let page = self.ledger_page(id, after, Some(1000)).await?;
            entries.extend(page.entries);
            match page.next_after {
                Some(next) => after = Some(next),
                None => return Ok(entries),
            }
        }
    }
}
