//! Passes run by the engine over real files: the same sums however the
//! rows are split, and never an answer on a changed file.

use super::*;
use crate::domain::dataset::DatasetRecord;
use crate::engine::Needed;
use crate::engine::tests::{append, dataset, fixture, people_dataset, read, uploaded};
use crate::releases::kinds::gradients::{Gradients, Grid, Logistic};
use crate::snapshots::{Columns, Pass};

/// Σ label, Σ features on a 2⁻²⁰ grid, Σ dimension codes, Σ measures on a
/// 2⁻¹⁰ grid, and the rows: every column of a row counted exactly.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct Everything {
    sums: [i128; 6],
}

impl Pass for Everything {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        for row in 0..block.len() {
            let row = block.row(row);
            let grid = |value: f64, bits: i32| (value * 2f64.powi(bits)).round() as i128;
            self.sums[0] += i128::from(row.label);
            self.sums[1] += grid(f64::from(row.features[0]), 20);
            self.sums[2] += grid(f64::from(row.features[1]), 20);
            self.sums[3] += i128::from(row.dimensions[0]);
            self.sums[4] += grid(row.measures[0], 10);
            self.sums[5] += 1;
        }
        Ok(())
    }
}

impl Summed for Everything {
    const KIND: &'static str = "everything";

    fn sums(&self) -> Vec<i128> {
        self.sums.to_vec()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        crate::engine::add_exact(&mut self.sums, sums)
    }
}

/// [`Everything`] but the features and row ids, which it does not read:
/// its blocks hold no feature, and empty ids.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct NoFeatures(Everything);

impl Pass for NoFeatures {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        if block.shape().features != 0 {
            return Err("a block with features".to_owned());
        }
        if (0..block.len()).any(|row| !block.id(row).is_empty()) {
            return Err("a block with row ids".to_owned());
        }
        for row in 0..block.len() {
            let row = block.row(row);
            let sums = &mut self.0.sums;
            sums[0] += i128::from(row.label);
            sums[3] += i128::from(row.dimensions[0]);
            sums[4] += (row.measures[0] * 2f64.powi(10)).round() as i128;
            sums[5] += 1;
        }
        Ok(())
    }
}

impl Summed for NoFeatures {
    const KIND: &'static str = "no-features";

    fn needs(&self) -> Needed {
        Needed {
            features: false,
            ids: false,
            ..Needed::all(true)
        }
    }

    fn sums(&self) -> Vec<i128> {
        self.0.sums()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        self.0.add_sums(sums)
    }
}

/// [`Everything`] but the dimensions, which it does not read: its blocks
/// hold none.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct NoDimensions(Everything);

impl Pass for NoDimensions {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        if block.shape().dimensions != 0 {
            return Err("a block with dimensions".to_owned());
        }
        for row in 0..block.len() {
            let row = block.row(row);
            let sums = &mut self.0.sums;
            sums[0] += i128::from(row.label);
            sums[1] += (f64::from(row.features[0]) * 2f64.powi(20)).round() as i128;
            sums[2] += (f64::from(row.features[1]) * 2f64.powi(20)).round() as i128;
            sums[4] += (row.measures[0] * 2f64.powi(10)).round() as i128;
            sums[5] += 1;
        }
        Ok(())
    }
}

impl Summed for NoDimensions {
    const KIND: &'static str = "no-dimensions";

    fn needs(&self) -> Needed {
        Needed {
            dimensions: false,
            ..Needed::all(true)
        }
    }

    fn sums(&self) -> Vec<i128> {
        self.0.sums()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        self.0.add_sums(sums)
    }
}

/// [`Everything`] grouped by the dimension: under unit `user`, bounded
/// per cell too.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct Grouped(Everything);

impl Pass for Grouped {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        self.0.visit(block)
    }
}

impl Summed for Grouped {
    const KIND: &'static str = "grouped";

    fn grouped_by(&self) -> Vec<usize> {
        vec![0]
    }

    fn sums(&self) -> Vec<i128> {
        self.0.sums()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        self.0.add_sums(sums)
    }
}

/// `pass` over the rows of unit `user` a release reads, in memory: the
/// whole version in one run, bounded ([`Columns::bounded`]).
async fn bounded_in_memory<S: Summed>(
    fixture: &crate::engine::tests::Fixture,
    record: &DatasetRecord,
    mut pass: S,
) -> S {
    let mut whole: Option<Columns> = None;
    for block in read(fixture, record, true, 1_000).await {
        let block = block.expect("a block");
        whole = Some(match whole {
            Some(earlier) => earlier.joined(&block).expect("joins"),
            None => block,
        });
    }
    let users = record.schema.users.as_ref().expect("people");
    let bounded = whole
        .expect("rows")
        .bounded(users, &pass.grouped_by(), pass.of_person().is_some())
        .expect("bounds");
    pass.visit(&bounded).expect("visits");
    pass
}

/// The pass over the rows as one stream reads them, in stored order.
async fn in_order(fixture: &crate::engine::tests::Fixture, record: &DatasetRecord) -> Everything {
    let mut pass = Everything::default();
    for block in read(fixture, record, true, 1_000).await {
        pass.visit(&block.expect("a block")).expect("visits");
    }
    pass
}

#[tokio::test]
async fn sums_are_bit_identical_for_any_partitions_and_file_order() {
    let fixture = fixture().await;
    let mut record = dataset(&fixture).await;
    for (from, to) in [
        (0, 3_000),
        (3_000, 3_001),
        (3_001, 70_000),
        (70_000, 71_234),
    ] {
        record = append(&fixture, &record, from, to).await;
    }
    let expected = in_order(&fixture, &record).await;
    assert_eq!(expected.sums[5], 71_234);
    let files = fixture
        .store
        .version_files(record.id, record.n_rows, true)
        .await
        .unwrap();
    assert_eq!(files.len(), 8, "four uploads, a pair of files each");
    // As many partitions as threads, never more than the uploads, whole
    // uploads each.
    for (threads, expected) in [(1, 1), (2, 2), (4, 4), (7, 4)] {
        let scan = super::super::scan::Scan::new(
            files.clone(),
            record.schema.clone(),
            crate::engine::Needed::all(true),
            threads,
        );
        assert_eq!(scan.parts.len(), expected, "{threads} threads");
    }
    // The uploads' pairs of files in reverse and in a shuffled order.
    let pairs: Vec<Vec<_>> = files.chunks(2).map(<[_]>::to_vec).collect();
    let orders = [
        files.clone(),
        pairs.iter().rev().flatten().cloned().collect(),
        [2, 0, 3, 1]
            .iter()
            .flat_map(|&at| pairs[at].clone())
            .collect(),
    ];
    for order in orders {
        for partitions in [1, 2, 7] {
            let summed = sum(
                &Engine::embedded(partitions),
                fixture.data.clone(),
                order.clone(),
                &record.schema,
                record.n_rows,
                Everything::default(),
            )
            .await
            .expect("sums");
            assert_eq!(summed.sums, expected.sums, "{partitions} partitions");
        }
    }
    // A pass that reads no feature is handed none, and sums the rest alike.
    let summed = sum(
        &Engine::embedded(2),
        fixture.data.clone(),
        files.clone(),
        &record.schema,
        record.n_rows,
        NoFeatures::default(),
    )
    .await
    .expect("sums");
    let mut without = expected.sums;
    (without[1], without[2]) = (0, 0);
    assert_eq!(summed.0.sums, without);
    // One that reads no dimension is handed none.
    let summed = sum(
        &Engine::embedded(2),
        fixture.data.clone(),
        files,
        &record.schema,
        record.n_rows,
        NoDimensions::default(),
    )
    .await
    .expect("sums");
    let mut without = expected.sums;
    without[3] = 0;
    assert_eq!(summed.0.sums, without);
}

/// A dataset of unit `user` (m = 5, g = 1, r = 2) of `uploads`, and the
/// sums of the in-memory bounding's rows: what the engine must give.
struct People {
    fixture: crate::engine::tests::Fixture,
    record: DatasetRecord,
    ungrouped: Everything,
    grouped: Grouped,
    gradients: Gradients<Logistic>,
}

/// A learner's pass over people: each person's logistic gradients at a
/// θ far from 0 summed, then clipped to 0.5 (two-level in the engine).
fn per_person() -> Gradients<Logistic> {
    let grid = Grid::per_person(0.5, 1.0, 3, true, 5).expect("a grid");
    Gradients::at(&grid, Logistic, &[0.3, -2.0, 3.5], true)
}

impl People {
    async fn new(uploads: &[(usize, usize)]) -> People {
        let fixture = fixture().await;
        let mut record = people_dataset(&fixture, [5, 1, 2]).await;
        for &(from, to) in uploads {
            record = append(&fixture, &record, from, to).await;
        }
        let ungrouped = bounded_in_memory(&fixture, &record, Everything::default()).await;
        let grouped = bounded_in_memory(&fixture, &record, Grouped::default()).await;
        let gradients = bounded_in_memory(&fixture, &record, per_person()).await;
        People {
            fixture,
            record,
            ungrouped,
            grouped,
            gradients,
        }
    }

    async fn files(&self) -> Vec<crate::domain::dataset::VersionFile> {
        let record = &self.record;
        let store = &self.fixture.store;
        store
            .version_files(record.id, record.n_rows, true)
            .await
            .unwrap()
    }

    /// `pass` by `engine` over `files`.
    async fn summed<S: Summed>(
        &self,
        engine: &Engine,
        files: &[crate::domain::dataset::VersionFile],
        pass: S,
    ) -> S {
        let (data, record) = (self.fixture.data.clone(), &self.record);
        sum(
            engine,
            data,
            files.to_vec(),
            &record.schema,
            record.n_rows,
            pass,
        )
        .await
        .expect("sums")
    }

    /// The engine's sums are the in-memory bounding's, grouped or not, or
    /// over people, and a pass is handed only the columns it reads.
    async fn check(&self, engine: &Engine, files: &[crate::domain::dataset::VersionFile]) {
        let gradients = self.summed(engine, files, per_person()).await;
        assert_eq!(gradients.sums(), self.gradients.sums());
        let everything = self.summed(engine, files, Everything::default()).await;
        assert_eq!(everything.sums, self.ungrouped.sums);
        let grouped = self.summed(engine, files, Grouped::default()).await;
        assert_eq!(grouped.0.sums, self.grouped.0.sums);
        let no_features = self.summed(engine, files, NoFeatures::default()).await;
        let mut without = self.ungrouped.sums;
        (without[1], without[2]) = (0, 0);
        assert_eq!(no_features.0.sums, without);
    }
}

/// Under unit `user` the engine sums the rows the in-memory bounding keeps
/// (at most m a person; grouped, g cells of r rows), for any partitions
/// and file order, and hands a pass only the columns it reads.
#[tokio::test]
async fn under_unit_user_the_engine_sums_each_persons_bounded_rows() {
    let people = People::new(&[(0, 3_000), (3_000, 3_001), (3_001, 9_000)]).await;
    let (ungrouped, grouped) = (&people.ungrouped, &people.grouped);
    // 102 people of the first 6 000 rows keep 5 rows each, or (grouped)
    // 2 rows of one device; the last 3 000 rows' 1 500 people keep both
    // rows, or one.
    assert_eq!(ungrouped.sums[5], 102 * 5 + 3_000);
    assert_eq!(grouped.0.sums[5], 102 * 2 + 1_500);
    // Each person's total is clipped, not each row's: one person of
    // unclipped rows would move the sum by more than the clip.
    let rows = Gradients::at(
        &Grid::new(0.5, 1.0, 3, true).unwrap(),
        Logistic,
        &[0.3, -2.0, 3.5],
        true,
    );
    let by_rows = bounded_in_memory(&people.fixture, &people.record, rows).await;
    assert_ne!(by_rows.sums(), people.gradients.sums());
    // The device kept is each person's own, not the same for all.
    let devices = grouped.0.sums[3];
    assert!(devices > 200 && devices < 1_500, "{devices}");
    let files = people.files().await;
    let reversed: Vec<_> = files.chunks(2).rev().flatten().cloned().collect();
    for order in [files, reversed] {
        for partitions in [1, 2, 7] {
            people.check(&Engine::embedded(partitions), &order).await;
        }
    }
}

/// [`Everything`] by `engine` over `files` once a bit of their first
/// outcomes file is flipped.
async fn summed_after_a_bit_flip(
    engine: &Engine,
    fixture: &crate::engine::tests::Fixture,
    record: &DatasetRecord,
    files: Vec<crate::domain::dataset::VersionFile>,
) -> Result<Everything, StoreError> {
    let outcomes = fixture.data.root().unwrap().join(&files[1].path);
    let mut flipped = std::fs::read(&outcomes).unwrap();
    flipped[9_001] ^= 0x01;
    std::fs::write(&outcomes, &flipped).unwrap();
    sum(
        engine,
        fixture.data.clone(),
        files,
        &record.schema,
        record.n_rows,
        Everything::default(),
    )
    .await
}

#[tokio::test]
async fn a_changed_file_or_a_short_manifest_fails_the_plan() {
    let (fixture, record, files) = uploaded(2_000).await;
    let short = sum(
        &Engine::embedded(2),
        fixture.data.clone(),
        files.clone(),
        &record.schema,
        record.n_rows + 1,
        Everything::default(),
    )
    .await;
    assert!(
        matches!(
            &short,
            Err(StoreError::Corrupt {
                what: "manifest",
                ..
            })
        ),
        "{:?}",
        short.err()
    );

    let changed = summed_after_a_bit_flip(&Engine::embedded(2), &fixture, &record, files).await;
    assert!(
        matches!(&changed, Err(StoreError::Changed(detail)) if detail.contains("hash is not the manifest's")),
        "{:?}",
        changed.err()
    );
}

#[test]
fn a_pass_travels_as_its_settings_and_an_unknown_kind_is_refused() {
    use super::super::summed::{Passes, SumsOf};
    let shape = crate::snapshots::Shape {
        features: 2,
        measures: 1,
        dimensions: 1,
        ids: false,
        labels: true,
        users: false,
    };
    let mut pass = Everything::default();
    pass.sums[4] = -(1 << 100);
    let function = SumsOf::new("dpgate_sums".to_owned(), Arc::new(pass), shape, true);
    let written = function.encode().expect("writes");
    let passes = Passes::default().with::<NoFeatures>().with::<Everything>();
    let read = SumsOf::decode("dpgate_sums", &written, &passes).expect("reads");
    assert_eq!(read.encode().expect("writes"), written);
    let unknown = SumsOf::decode(
        "dpgate_sums",
        &written,
        &Passes::default().with::<NoFeatures>(),
    )
    .expect_err("an unknown kind");
    assert!(
        unknown
            .to_string()
            .contains(r#"no pass of kind "everything""#),
        "{unknown}"
    );
    let garbled = SumsOf::decode("dpgate_sums", &written[1..], &passes).expect_err("not JSON");
    assert!(garbled.to_string().contains("expected"), "{garbled}");
}

/// The same plans on a Ballista cluster in this process (a scheduler and
/// its executors on free ports, as `dpgate scheduler` and `dpgate
/// executor` run them): bit-identical sums with one executor and with two.
#[cfg(feature = "ballista")]
mod on_a_cluster {
    use std::net::{SocketAddr, TcpListener};

    use super::*;
    use crate::engine::{Codec, Passes};

    /// A free port whose next port is free too (an executor's gRPC one).
    fn free_pair() -> SocketAddr {
        loop {
            let first = TcpListener::bind("127.0.0.1:0").unwrap();
            let address = first.local_addr().unwrap();
            if TcpListener::bind(("127.0.0.1", address.port() + 1)).is_ok() {
                return address;
            }
        }
    }

    fn codec(dir: &Arc<DataDir>) -> Arc<Codec> {
        Codec::new(
            dir.clone(),
            Passes::default()
                .with::<Everything>()
                .with::<NoFeatures>()
                .with::<Grouped>()
                .with::<Gradients<Logistic>>(),
        )
    }

    /// A scheduler and `executors` executors reading `dir`: the engine
    /// that sends them its passes.
    async fn cluster(dir: &Arc<DataDir>, executors: usize) -> Engine {
        let scheduler = free_pair();
        tokio::spawn(crate::engine::scheduler(scheduler, codec(dir)));
        while tokio::net::TcpStream::connect(scheduler).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        for _ in 0..executors {
            let codec = codec(dir);
            tokio::spawn(async move {
                crate::engine::executor(&scheduler.to_string(), free_pair(), None, Some(2), codec)
                    .await
            });
        }
        let url = format!("ballista://{scheduler}");
        Engine::ballista(crate::engine::Cluster::new(&url, codec(dir)).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sums_on_one_or_two_executors_are_the_embedded_sums() {
        let fixture = fixture().await;
        let mut record = dataset(&fixture).await;
        for (from, to) in [(0, 3_000), (3_000, 3_001), (3_001, 20_000)] {
            record = append(&fixture, &record, from, to).await;
        }
        let expected = in_order(&fixture, &record).await;
        let files = fixture
            .store
            .version_files(record.id, record.n_rows, true)
            .await
            .unwrap();
        let shuffled: Vec<_> = files.chunks(2).rev().flatten().cloned().collect();
        for executors in [1, 2] {
            let engine = cluster(&fixture.data, executors).await;
            for order in [files.clone(), shuffled.clone()] {
                let summed = sum(
                    &engine,
                    fixture.data.clone(),
                    order,
                    &record.schema,
                    record.n_rows,
                    Everything::default(),
                )
                .await
                .expect("sums on the cluster");
                assert_eq!(summed.sums, expected.sums, "{executors} executors");
            }
            let summed = sum(
                &engine,
                fixture.data.clone(),
                files.clone(),
                &record.schema,
                record.n_rows,
                NoFeatures::default(),
            )
            .await
            .expect("sums on the cluster");
            let mut without = expected.sums;
            (without[1], without[2]) = (0, 0);
            assert_eq!(summed.0.sums, without, "{executors} executors");
        }
    }

    /// Under unit `user` the cluster's executors bound each person's rows
    /// by the same windows: the in-memory bounding's sums.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn under_unit_user_a_cluster_sums_the_bounded_rows() {
        let people = People::new(&[(0, 3_000), (3_000, 9_000)]).await;
        let engine = cluster(&people.fixture.data, 2).await;
        people.check(&engine, &people.files().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_changed_file_fails_the_plan_on_the_cluster() {
        let (fixture, record, files) = uploaded(2_000).await;
        let engine = cluster(&fixture.data, 1).await;
        let changed = summed_after_a_bit_flip(&engine, &fixture, &record, files).await;
        assert!(
            matches!(&changed, Err(StoreError::Files(detail)) if detail.contains("hash is not the manifest's")),
            "{:?}",
            changed.err()
        );
    }
}
