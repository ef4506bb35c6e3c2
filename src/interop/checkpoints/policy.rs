//! Keep policies: which checkpoints of a directory to keep, decided from their steps,
//! timestamps and metadata alone (so the same policy gives the same answer from a library call
//! and from the CLI, and pruning again changes nothing).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::native::{MetaValue, Metadata};

/// Which checkpoints to keep. Each rule names checkpoints to keep; a checkpoint is kept when
/// any rule keeps it. A policy with no rule keeps everything. Whatever the policy, pruning never
/// deletes the latest checkpoint, one being written, or the base of an incremental save in
/// progress.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeepPolicy {
    /// The `n` most recent saves (TensorFlow's `max_to_keep`): the last `n` candidates, which
    /// [`KeepPolicy::keep`] takes in the order they were saved. After a job resumed from an
    /// earlier step these are its new saves, not the higher steps it abandoned.
    pub last: Option<usize>,
    /// One checkpoint every `k` steps: the lowest step in each range `[i*k, (i+1)*k)` (with
    /// saves on multiples of `k`, exactly those).
    pub every_steps: Option<u64>,
    /// One checkpoint every span of wall time: the earliest saved in each span
    /// `[i*T, (i+1)*T)` since the Unix epoch (a checkpoint without a timestamp is not kept by
    /// this rule).
    pub every_duration: Option<Duration>,
    /// The best checkpoints by a number in their metadata.
    pub best: Option<BestBy>,
}

/// Keep the `count` best checkpoints by the metadata value `key` (an integer or a float).
/// Checkpoints without it (or with a value that is not a number, or NaN) are not ranked; ties
/// go to the later step.
#[derive(Clone, Debug, PartialEq)]
pub struct BestBy {
    /// The metadata key.
    pub key: String,
    /// How many to keep.
    pub count: usize,
    /// Higher is better (accuracy) when true, lower (loss) when false.
    pub higher_is_better: bool,
}

/// What a policy decides about one checkpoint.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// Its step.
    pub step: u64,
    /// When it was saved, in seconds since the Unix epoch, if known.
    pub timestamp: Option<f64>,
    /// Its metadata, if it could be read.
    pub metadata: Option<&'a Metadata>,
}

impl KeepPolicy {
    /// Whether the policy has no rule (keeps everything).
    pub fn is_empty(&self) -> bool {
        self.last.is_none()
            && self.every_steps.is_none()
            && self.every_duration.is_none()
            && self.best.is_none()
    }

    /// The steps of `all` this policy keeps (protections not applied). `all` is in the order
    /// the checkpoints were saved, oldest first (as a checkpoint directory's state file lists
    /// them); only [`KeepPolicy::last`] depends on that order.
    pub fn keep(&self, all: &[Candidate<'_>]) -> BTreeSet<u64> {
        if self.is_empty() {
            return all.iter().map(|c| c.step).collect();
        }
        let mut keep = BTreeSet::new();
        if let Some(n) = self.last {
            keep.extend(all.iter().rev().take(n).map(|c| c.step));
        }
        let mut steps: Vec<u64> = all.iter().map(|c| c.step).collect();
        steps.sort_unstable();
        if let Some(k) = self.every_steps.filter(|k| *k > 0) {
            let mut seen = BTreeSet::new();
            for s in &steps {
                if seen.insert(s / k) {
                    keep.insert(*s);
                }
            }
        }
        if let Some(t) = self
            .every_duration
            .map(|d| d.as_secs_f64())
            .filter(|t| *t > 0.0)
        {
            let mut timed: Vec<(f64, u64)> = all
                .iter()
                .filter_map(|c| c.timestamp.filter(|x| x.is_finite()).map(|x| (x, c.step)))
                .collect();
            timed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut seen = BTreeSet::new();
            for (ts, step) in timed {
                // Spans are numbered by floor(ts / T); the float-to-int cast saturates.
                if seen.insert((ts / t).floor() as i64) {
                    keep.insert(step);
                }
            }
        }
        if let Some(b) = &self.best {
            let mut ranked: Vec<(f64, u64)> = all
                .iter()
                .filter_map(|c| {
                    let v = match c.metadata?.get(&b.key)? {
                        MetaValue::Int(i) => *i as f64,
                        MetaValue::Float(f) => *f,
                        _ => return None,
                    };
                    (!v.is_nan()).then_some((v, c.step))
                })
                .collect();
            ranked.sort_by(|x, y| {
                let by_value = if b.higher_is_better {
                    y.0.total_cmp(&x.0)
                } else {
                    x.0.total_cmp(&y.0)
                };
                by_value.then(y.1.cmp(&x.1))
            });
            keep.extend(ranked.iter().take(b.count).map(|(_, s)| *s));
        }
        keep
    }
}
