//! A gradient session is paid when it is opened, which reads nothing; each
//! call then reads the rows once. A call that is refused (an index past
//! the session's T, or a paid index at another θ) and a replay of a made
//! call read nothing, and no call changes the ledger. Sessions need a
//! snapshot cache, so only the cold and warm servers are tried.

use dpgate_client::ReleaseOptions;
use dpgate_client::types::{GradientCall, ProblemType};
use rstest::rstest;

use super::catalogue::gradient;
use super::{Mode, Seen, Server, problem};
use crate::helpers::{Backend, unavailable};

/// T of the session.
const CALLS: u32 = 10;

#[rstest]
#[tokio::test]
async fn session_calls_read_the_rows_only_when_made(
    #[values(Backend::Sqlite, Backend::Postgres)] backend: Backend,
    #[values(Mode::Cold, Mode::Warm)] mode: Mode,
    #[values("label", "row")] unit: &str,
) {
    if unavailable(backend) {
        return;
    }
    let (mut server, dataset) = Server::with_dataset(backend, mode, unit, 100.0).await;
    let analyst = server.analyst("ana", &[dataset]);
    let opened = analyst
        .release(
            dataset,
            &gradient(None, Some(CALLS)),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap()
        .release;
    let seen = server.seen();
    assert!(!seen.private(unit), "opening a session read: {seen:?}");
    let session = opened.id.unwrap();
    let before = server.ledgers(&[dataset]).await;
    let at = |call: u32, theta: [f64; 3]| GradientCall {
        call,
        theta: theta.to_vec(),
    };

    let made = analyst
        .gradient_call(dataset, session, &at(0, [0.1, -0.2, 0.3]))
        .await
        .unwrap();
    assert_eq!((made.call, made.remaining), (0, CALLS - 1));
    server.assert_read(server.seen(), unit, "call 0");
    // A cold server forgets the snapshot call 0 loaded, so that a refused
    // call that loaded it again would show.
    server.cool().await;
    let analyst = server.analyst("ana", &[dataset]);

    let replayed = analyst
        .gradient_call(dataset, session, &at(0, [0.1, -0.2, 0.3]))
        .await
        .unwrap();
    assert_eq!(replayed, made);
    assert_eq!(server.seen(), Seen::default(), "a replay read");

    for (case, call, status, kind) in [
        (
            "call 0 at another theta",
            at(0, [0.1, -0.2, 0.4]),
            409,
            ProblemType::Conflict,
        ),
        (
            "call T",
            at(CALLS, [0.1, -0.2, 0.3]),
            422,
            ProblemType::InvalidInput,
        ),
        (
            "call 2^31",
            at(1 << 31, [0.1, -0.2, 0.3]),
            422,
            ProblemType::InvalidInput,
        ),
    ] {
        let error = analyst
            .gradient_call(dataset, session, &call)
            .await
            .unwrap_err();
        problem(&error, status, kind, case);
        assert_eq!(server.seen(), Seen::default(), "{case} read");
    }
    assert_eq!(server.ledgers(&[dataset]).await, before);
    server.finish().await;
}
