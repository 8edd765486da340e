//! `gradient` end to end: single calls, pre-paid sessions debited once,
//! their calls each spent once at the snapshot they were priced for, and
//! refusals that spend nothing.

use std::time::Duration;

use dpgate::api::{AppState, Limits};
use dpgate::domain::auth::Role;
use dpgate_client::UploadFormat;
use dpgate_client::types::{
    GradientCallResult, GradientLoss, GradientMechanism, GradientParams, GradientResult, Problem,
    ProblemType, Release, ReleaseParams, ReleaseRequest, ReleaseResult,
};
use reqwest::StatusCode;
use rstest::rstest;
use uuid::Uuid;

use crate::bad_input::{expect, snapshot};
use crate::counting::Counting;
use crate::helpers::{
    Backend, Cache, TestApp, ads_dataset, ads_rows, spawn_app, spawn_app_caching, spawn_app_over,
    unavailable,
};
use crate::learners::{each_invalid, priced_then_released};

/// Rows of [`ads_rows`].
const N: usize = 2000;

/// A dataset of [`N`] rows of [`ads_rows`] on a ledger of (`epsilon`, δ).
async fn dataset(app: &TestApp, name: &str, accountant: &str, epsilon: f64, delta: f64) -> Uuid {
    let mut request = ads_dataset(name, "row", accountant, epsilon);
    request["budget"]["delta"] = delta.into();
    let dataset = app.dataset(request).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, N))
        .await
        .unwrap();
    dataset.id
}

fn gradient(epsilon: f64, params: GradientParams) -> ReleaseRequest {
    let delta = match params.mechanism {
        GradientMechanism::Gaussian => Some(1e-6),
        GradientMechanism::NormGamma => None,
    };
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta,
        params: ReleaseParams::Gradient(params),
    }
}

fn defaults() -> GradientParams {
    GradientParams {
        loss: GradientLoss::Logistic,
        target: "label".to_owned(),
        label_values: None,
        clip: 1.0,
        fit_intercept: true,
        mechanism: GradientMechanism::Gaussian,
        theta: None,
        calls: None,
    }
}

fn session(calls: u32) -> GradientParams {
    GradientParams {
        calls: Some(calls),
        ..defaults()
    }
}

fn at(theta: Vec<f64>) -> GradientParams {
    GradientParams {
        theta: Some(theta),
        ..defaults()
    }
}

fn result(release: &Release) -> &GradientResult {
    let Some(ReleaseResult::Gradient(result)) = &release.result else {
        panic!("a gradient result: {release:?}");
    };
    result
}

/// One row of [`ads_rows`] as (u = (1, x̃), label, value).
fn row(index: usize) -> ([f64; 3], f64, f64) {
    // As stored: f32.
    let f0 = f64::from(((index % 10) as f64 / 10.0) as f32);
    let f1 = f64::from(((index % 7) as f64 - 3.0) as f32);
    let label = f64::from(u8::from(index.is_multiple_of(3)));
    ([1.0, f0, (f1 + 5.0) / 10.0], label, (index % 150) as f64)
}

/// The exact mean clipped gradient over `rows`, by hand.
fn exact(
    rows: &[([f64; 3], f64, f64)],
    theta: &[f64],
    loss: GradientLoss,
    measure: bool,
    clip: f64,
) -> Vec<f64> {
    let mut sum = [0.0; 3];
    for (u, label, value) in rows {
        // The measure is clamped to its bounds [0, 100] on upload.
        let y = if measure {
            value.min(100.0) / 100.0
        } else {
            *label
        };
        let z: f64 = u.iter().zip(theta).map(|(a, b)| a * b).sum();
        let r = match loss {
            GradientLoss::Logistic => 1.0 / (1.0 + (-z).exp()) - y,
            GradientLoss::Squared => z - y,
        };
        let norm = r.abs() * u.iter().map(|v| v * v).sum::<f64>().sqrt();
        let factor = r * (clip / norm).min(1.0);
        for (total, v) in sum.iter_mut().zip(u) {
            *total += factor * v;
        }
    }
    sum.iter().map(|total| total / rows.len() as f64).collect()
}

/// Posts call `index` at `theta` to session `release` on `server` as
/// `token`.
fn call(
    server: &str,
    token: &str,
    (dataset, release): (Uuid, Uuid),
    index: u32,
    theta: &serde_json::Value,
) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!(
            "{server}/v1/datasets/{dataset}/releases/{release}/calls"
        ))
        .bearer_auth(token)
        .json(&serde_json::json!({"call": index, "theta": theta}))
}

async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, String) {
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// A session of 10 calls at ε = 1 opened by "ana" on a fresh dataset: her
/// token, and (dataset, release).
async fn open_session(app: &TestApp) -> (String, (Uuid, Uuid)) {
    let dataset = dataset(app, "ads", "rdp", 3.0, 1e-6).await;
    let opened = app
        .analyst("ana", &[dataset])
        .release(dataset, &gradient(1.0, session(10)), &Default::default())
        .await
        .unwrap()
        .release;
    let token = app.token(Role::Analyst, "ana", &[dataset]);
    (token, (dataset, opened.id.unwrap()))
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_session_is_debited_once_and_each_call_spent_once(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = dataset(&app, "ads", "rdp", 3.0, 1e-6).await;
    let analyst = app.analyst("ana", &[dataset]);
    let release = priced_then_released(&analyst, dataset, &gradient(1.0, session(100))).await;
    assert_eq!(release.kind, "gradient");
    // T = 100 calls at ε = 1, δ = 10⁻⁶ cost ε once, composed exactly.
    assert_eq!(release.spent.epsilon_basic, 1.0);
    assert!(
        (0.99..=1.0).contains(&release.spent.epsilon),
        "{:?}",
        release.spent
    );
    let opened = result(&release);
    assert_eq!(opened.gradient, None);
    assert_eq!(opened.session.unwrap().calls, 100);
    assert_eq!((opened.space.as_str(), opened.n), ("model", Some(N as u64)));
    assert_eq!(opened.feature_bounds, vec![[0.0, 1.0], [-5.0, 5.0]]);
    assert_eq!(opened.sigma, release.sigma);
    // LEARNERS.md: ε ≈ 0.0850 a call alone.
    let relative = (opened.call_epsilon / 0.08501159194347357 - 1.0).abs();
    assert!(relative < 1e-4, "{}", opened.call_epsilon);

    let single = priced_then_released(&analyst, dataset, &gradient(0.5, at(vec![0.0; 3]))).await;
    assert_eq!(result(&single).gradient.as_ref().unwrap().len(), 3);
    assert_eq!(result(&single).session, None);

    let id = release.id.unwrap();
    let token = app.token(Role::Analyst, "ana", &[dataset]);
    let before = snapshot(&app, dataset).await;
    let theta = serde_json::json!([0.1, -0.2, 0.3]);
    let session = (dataset, id);
    let (status, first) = answer(call(&app.address, &token, session, 0, &theta)).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let made: GradientCallResult = serde_json::from_str(&first).unwrap();
    assert_eq!((made.call, made.gradient.len(), made.remaining), (0, 3, 99));
    // The same call at the same θ: the stored answer, byte for byte.
    let again = answer(call(&app.address, &token, session, 0, &theta)).await;
    assert_eq!(again, (StatusCode::OK, first));
    // At another θ: a second draw for one paid call, refused.
    let other = serde_json::json!([0.1, -0.2, 0.4]);
    expect(
        call(&app.address, &token, session, 0, &other),
        StatusCode::CONFLICT,
        "conflict",
        "another theta",
    )
    .await;
    let (status, body) = answer(call(&app.address, &token, session, 99, &theta)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let made: GradientCallResult = serde_json::from_str(&body).unwrap();
    assert_eq!((made.call, made.remaining), (99, 98));
    expect(
        call(&app.address, &token, session, 100, &theta),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-input",
        "a 101st call",
    )
    .await;
    // Only the analyst who opened it (404); only sessions (422).
    let bob = app.token(Role::Analyst, "bob", &[dataset]);
    expect(
        call(&app.address, &bob, session, 1, &theta),
        StatusCode::NOT_FOUND,
        "not-found",
        "another analyst",
    )
    .await;
    expect(
        call(&app.address, &token, (dataset, Uuid::new_v4()), 1, &theta),
        StatusCode::NOT_FOUND,
        "not-found",
        "no such release",
    )
    .await;
    expect(
        call(
            &app.address,
            &token,
            (dataset, single.id.unwrap()),
            1,
            &theta,
        ),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-input",
        "a single call is not a session",
    )
    .await;
    // The session's calls spent nothing.
    assert_eq!(snapshot(&app, dataset).await, before);
    app.finish().await;
}

/// A session whose server restarts (nothing held in memory) over a store
/// that now fails every read of private rows: each call fails after its
/// claim, stays spent, and answers every retry with the same
/// `release-failed`.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_call_that_fails_after_its_claim_stays_spent_and_answers_the_same_failure(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let (token, session) = open_session(&app).await;
    let before = snapshot(&app, session.0).await;
    let broken = AppState::new(
        Counting::broken(app.store.clone()),
        app.snapshots.data().clone(),
        app.keys.clone(),
        Limits::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let restarted = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, dpgate::api::router(broken))
            .await
            .unwrap();
    });
    let theta = serde_json::json!([0.1, -0.2, 0.3]);
    let failed = |body: &str| {
        let problem: Problem = serde_json::from_str(body).unwrap();
        assert_eq!(problem.kind(), Some(ProblemType::ReleaseFailed), "{body}");
        assert_eq!(problem.release_id, Some(session.1));
        assert!(problem.detail.contains("call 3 "), "{}", problem.detail);
        problem.detail
    };
    let (status, body) = answer(call(&restarted, &token, session, 3, &theta)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let detail = failed(&body);
    // Retries, on either server, get the same answer.
    for server in [&restarted, &app.address] {
        let (status, body) = answer(call(server, &token, session, 3, &theta)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_eq!(failed(&body), detail);
    }
    // The claim stands: the call is not made again at another θ.
    expect(
        call(
            &app.address,
            &token,
            session,
            3,
            &serde_json::json!([0, 0, 0]),
        ),
        StatusCode::CONFLICT,
        "conflict",
        "a failed call at another theta",
    )
    .await;
    let stored = app.store.call(session.1, 3).await.unwrap().unwrap();
    assert_eq!((stored.response, stored.failure), (None, Some(detail)));
    // The other calls are still there to make, where the rows can be read.
    let (status, body) = answer(call(&app.address, &token, session, 4, &theta)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(snapshot(&app, session.0).await, before);
    server.abort();
    app.finish().await;
}

/// Two requests for one call at once, while the first is still reading the
/// rows (a slowed store): one claims and makes it, the other waits for it
/// and gets the same bytes. With different θ, exactly one is answered and
/// the other refused: one paid call is one draw.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn concurrent_requests_for_one_call_get_one_draw(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app_over(backend, Limits::default(), |store| {
        Counting::slowed(store, Duration::from_millis(500))
    })
    .await;
    let (token, session) = open_session(&app).await;
    let theta = serde_json::json!([0.1, -0.2, 0.3]);
    let (first, second) = tokio::join!(
        answer(call(&app.address, &token, session, 0, &theta)),
        answer(call(&app.address, &token, session, 0, &theta)),
    );
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    assert_eq!(first, second);
    let made: GradientCallResult = serde_json::from_str(&first.1).unwrap();
    assert_eq!((made.call, made.remaining), (0, 9));

    let other = serde_json::json!([0.1, -0.2, 0.4]);
    let raced = tokio::join!(
        answer(call(&app.address, &token, session, 1, &theta)),
        answer(call(&app.address, &token, session, 1, &other)),
    );
    let mut statuses = [raced.0.0, raced.1.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::CONFLICT],
        "{raced:?}"
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_session_costs_once_what_separate_calls_cost_many_times_on_a_basic_ledger(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let pooled = dataset(&app, "pooled", "basic", 10.0, 1e-6).await;
    let separate = dataset(&app, "separate", "basic", 100.0, 1e-3).await;
    let analyst = app.analyst("ana", &[pooled, separate]);
    let release = priced_then_released(&analyst, pooled, &gradient(1.0, session(100))).await;
    assert_eq!(release.spent.epsilon, 1.0);
    let call_epsilon = result(&release).call_epsilon;
    // 100 single calls at that σ's own ε: the basic accountant adds them.
    for _ in 0..100 {
        analyst
            .release(
                separate,
                &gradient(call_epsilon, at(vec![0.0; 3])),
                &Default::default(),
            )
            .await
            .unwrap();
    }
    let spent = app.admin.dataset(separate).await.unwrap().spent;
    assert!(
        (8.4..8.6).contains(&spent.epsilon),
        "100 calls at ε = {call_epsilon}: {spent:?}"
    );
    app.finish().await;
}

/// In memory, and with no snapshot held, where each call is one pass of
/// the engine over the version's files.
#[rstest]
#[case::sqlite_held(Backend::Sqlite, Cache::Held)]
#[case::sqlite_streamed(Backend::Sqlite, Cache::Streamed)]
#[case::postgres_held(Backend::Postgres, Cache::Held)]
#[case::postgres_streamed(Backend::Postgres, Cache::Streamed)]
#[tokio::test]
async fn calls_are_within_a_few_sigma_of_the_exact_gradient_on_the_priced_snapshot(
    #[case] backend: Backend,
    #[case] cache: Cache,
) {
    if unavailable(backend) {
        return;
    }
    let rows: Vec<_> = (0..N).map(row).collect();
    let cache_bytes = cache.bytes();
    let app = spawn_app_caching(backend, cache_bytes).await;
    let dataset = dataset(&app, "ads", "rdp", 1000.0, 1e-6).await;
    let analyst = app.analyst("ana", &[dataset]);
    let theta = vec![0.5, -1.0, 2.0];
    for (loss, target, values) in [
        (GradientLoss::Logistic, "label", None),
        (GradientLoss::Squared, "measure:value", None),
        (GradientLoss::Squared, "label", Some([-1.0, 1.0])),
    ] {
        let params = GradientParams {
            loss,
            target: target.to_owned(),
            label_values: values,
            clip: 0.5,
            ..at(theta.clone())
        };
        let release = priced_then_released(&analyst, dataset, &gradient(100.0, params)).await;
        let made = result(&release);
        let mut want = exact(&rows, &theta, loss, target != "label", 0.5);
        if values.is_some() {
            // y ∈ {−1, 1} = 2·label − 1.
            let shifted: Vec<_> = rows
                .iter()
                .map(|(u, label, value)| (*u, 2.0 * label - 1.0, *value))
                .collect();
            want = exact(&shifted, &theta, loss, false, 0.5);
        }
        for (got, want) in made.gradient.as_ref().unwrap().iter().zip(&want) {
            assert!(
                (got - want).abs() < 6.0 * made.sigma + release.noise.grid,
                "{loss:?} on {target}, cache {cache_bytes}: {got} vs {want} (σ = {})",
                made.sigma
            );
        }
    }
    // A session reads the rows it was priced for, not later ones.
    let request = gradient(
        200.0,
        GradientParams {
            clip: 0.5,
            ..session(2)
        },
    );
    let opened = priced_then_released(&analyst, dataset, &request).await;
    let mut later = String::from("row_id,converted,f0,f1,value,campaign\n");
    for index in 0..N {
        later.push_str(&format!("late{index},1,1,5,100,a\n"));
    }
    app.admin
        .upload_rows(dataset, UploadFormat::Csv, later)
        .await
        .unwrap();
    let token = app.token(Role::Analyst, "ana", &[dataset]);
    let session = (dataset, opened.id.unwrap());
    let (status, text) = answer(call(
        &app.address,
        &token,
        session,
        0,
        &theta.clone().into(),
    ))
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let made: GradientCallResult = serde_json::from_str(&text).unwrap();
    let want = exact(&rows, &theta, GradientLoss::Logistic, false, 0.5);
    let sigma = result(&opened).sigma;
    for (got, want) in made.gradient.iter().zip(&want) {
        assert!(
            (got - want).abs() < 6.0 * sigma + opened.noise.grid,
            "cache {cache_bytes}: {got} vs {want} (σ = {sigma})"
        );
    }
    if cache_bytes == 0 {
        assert_eq!(app.snapshots.take_reads().loads, 0, "nothing held");
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_gradient_requests_are_refused_without_spending(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let cases: Vec<(&str, String)> = [
        ("theta too short", r#", "theta": [0, 0]"#),
        ("theta too large", r#", "theta": [0, 2e6, 0]"#),
        ("theta not a number", r#", "theta": [0, "NaN", 0]"#),
        ("theta with calls", r#", "theta": [0, 0, 0], "calls": 10"#),
        ("no theta", ""),
        ("calls 0", r#", "calls": 0"#),
        ("calls 10001", r#", "calls": 10001"#),
        (
            "label_values with logistic",
            r#", "theta": [0, 0, 0], "label_values": [-1, 1]"#,
        ),
        (
            "label_values with a measure",
            r#", "theta": [0, 0, 0], "loss": "squared", "target": "measure:value", "label_values": [-1, 1]"#,
        ),
        ("unknown loss", r#", "theta": [0, 0, 0], "loss": "hinge""#),
        ("unknown mechanism", r#", "theta": [0, 0, 0], "mechanism": "laplace""#),
        ("unknown target", r#", "theta": [0, 0, 0], "target": "measure:nope""#),
        ("norm_gamma with δ > 0", r#", "theta": [0, 0, 0], "mechanism": "norm_gamma""#),
        ("clip 0", r#", "theta": [0, 0, 0], "clip": 0"#),
        ("an unknown field", r#", "theta": [0, 0, 0], "steps": 2"#),
    ]
    .into_iter()
    .map(|(case, fields)| (case, fields.to_owned()))
    .collect();
    let app = spawn_app(backend).await;
    let (token, session) = open_session(&app).await;
    let dataset = session.0;
    let before = snapshot(&app, dataset).await;
    let path = format!("/v1/datasets/{dataset}/releases");
    let base = r#""kind": "gradient", "epsilon": 1, "delta": 1e-6"#;
    each_invalid(&app, &token, &path, base, &cases).await;
    let gaussian_without_delta = [("gaussian with δ = 0", r#", "theta": [0, 0, 0]"#.to_owned())];
    let pure = r#""kind": "gradient", "epsilon": 1"#;
    each_invalid(&app, &token, &path, pure, &gaussian_without_delta).await;
    // A call's bad θ spends no call.
    let calls: Vec<(&str, String)> = [
        ("theta too long", r#", "theta": [0, 0, 0, 0]"#),
        ("theta too large", r#", "theta": [0, 0, -1e7]"#),
        ("no theta", ""),
        ("an unknown field", r#", "theta": [0, 0, 0], "clip": 2"#),
    ]
    .into_iter()
    .map(|(case, fields)| (case, fields.to_owned()))
    .collect();
    let session_path = format!("/v1/datasets/{dataset}/releases/{}/calls", session.1);
    each_invalid(&app, &token, &session_path, r#""call": 0"#, &calls).await;
    let zero = serde_json::json!([0, 0, 0]);
    let (status, text) = answer(call(&app.address, &token, session, 0, &zero)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let made: GradientCallResult = serde_json::from_str(&text).unwrap();
    assert_eq!(made.remaining, 9);
    assert_eq!(snapshot(&app, dataset).await, before);
    app.finish().await;
}
