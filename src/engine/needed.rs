//! Which columns a pass reads, and what each row read then holds.

use crate::domain::dataset::Schema;
use crate::snapshots::Shape;

/// Which columns a [`super::stream`] reads: a column not read is never decoded,
/// and its blocks hold none (a shape without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Needed {
    /// Labels: with the measures, the outcomes; with neither, no outcomes
    /// file is opened.
    pub labels: bool,
    pub measures: bool,
    pub features: bool,
    /// Row ids: else every row's id is empty.
    pub ids: bool,
    /// Dimension codes.
    pub dimensions: bool,
    /// Each row's person (unit `user`), from the outcomes file, which it
    /// opens even when no label and no measure is read: what the
    /// bounding reads besides the row ids.
    pub people: bool,
}

impl Needed {
    /// Every column, outcomes only if `outcomes`.
    pub fn all(outcomes: bool) -> Needed {
        Needed {
            labels: outcomes,
            measures: outcomes,
            features: true,
            ids: true,
            dimensions: true,
            people: outcomes,
        }
    }

    /// The features and the label or the measures (as `measures` says),
    /// no row id, no dimension: what a learner's pass reads.
    pub fn features_and(measures: bool) -> Needed {
        Needed {
            labels: !measures,
            measures,
            features: true,
            ids: false,
            dimensions: false,
            people: false,
        }
    }

    /// These, and what bounding each person's rows reads: the row ids and
    /// the people.
    pub fn with_people(self) -> Needed {
        Needed {
            ids: true,
            people: true,
            ..self
        }
    }

    /// Whether the outcomes file is opened.
    pub fn outcomes(&self) -> bool {
        self.labels || self.measures || self.people
    }

    /// What each row read of `schema` holds.
    pub fn shape(&self, schema: &Schema) -> Shape {
        let all = Shape::of(schema);
        let kept = |read: bool, count: usize| if read { count } else { 0 };
        Shape {
            features: kept(self.features, all.features),
            measures: kept(self.measures, all.measures),
            dimensions: kept(self.dimensions, all.dimensions),
            ids: self.ids,
            labels: self.labels,
            users: all.users && self.outcomes(),
        }
    }
}
