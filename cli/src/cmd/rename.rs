//! `convert --rename FROM=TO` and `--strip-prefix P`: the tensors' names changed on the way
//! out (a DCP checkpoint's `model.layers.0.weight` becomes a Hugging Face model's
//! `layers.0.weight`).
//!
//! The rules: each name is changed by the first rule whose FROM it starts with, the
//! `--rename` rules first in the order given, then the `--strip-prefix` ones (a `--rename P=`
//! each); a name no rule matches is kept. Selection (`--include`, `--exclude`) is by the
//! input's names, before renaming. Two tensors whose new names are the same, and a name made
//! empty, are errors naming the tensors, found before anything is written.

use paramdex::interop::{
    Format, LoadedTensor, TensorInfo, TensorInfos, TensorStore, VerifySummary,
};
use paramdex::{name, Error, Metadata, Reader, Region, Result};

/// The renaming rules, in the order they are tried.
#[derive(Debug, Default, Clone)]
pub struct Rules {
    rules: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Rules {
    /// The rules of `--rename FROM=TO` (each) then `--strip-prefix P` (each).
    pub fn new(rename: &[String], strip: &[String]) -> Result<Rules> {
        let mut rules = Vec::new();
        for r in rename {
            let (from, to) = r.split_once('=').ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "--rename {r:?}: FROM=TO, as model.=  or  model.layers.=layers."
                ))
            })?;
            if from.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "--rename {r:?}: FROM is empty (every name would match); a prefix to add \
                     is not a rename"
                )));
            }
            rules.push((from.as_bytes().to_vec(), to.as_bytes().to_vec()));
        }
        for p in strip {
            if p.is_empty() {
                return Err(Error::InvalidArgument(
                    "--strip-prefix: an empty prefix".into(),
                ));
            }
            rules.push((p.as_bytes().to_vec(), Vec::new()));
        }
        Ok(Rules { rules })
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The new name of `old`.
    fn apply(&self, old: &[u8]) -> Vec<u8> {
        for (from, to) in &self.rules {
            if let Some(rest) = old.strip_prefix(from.as_slice()) {
                let mut n = to.clone();
                n.extend_from_slice(rest);
                return n;
            }
        }
        old.to_vec()
    }
}

/// The input with its tensors renamed, listed in the new names' order.
pub struct Renamed<'a> {
    inner: &'a dyn TensorStore,
    /// (new name, old name), sorted by new name.
    names: Vec<(Vec<u8>, Vec<u8>)>,
}

impl<'a> Renamed<'a> {
    /// Renames every tensor `inner` lists by `rules`; refuses collisions and empty names.
    pub fn new(inner: &'a dyn TensorStore, rules: &Rules) -> Result<Renamed<'a>> {
        let mut names = Vec::new();
        for t in inner.scan(b"")? {
            let t = t?;
            let new = rules.apply(&t.name);
            if new.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "renaming tensor {} leaves an empty name",
                    name::display(&t.name)
                )));
            }
            names.push((new, t.name));
        }
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidArgument(format!(
                "tensors {} and {} would both be named {}: change the --rename/--strip-prefix \
                 rules or leave one out with --exclude",
                name::display(&w[0].1),
                name::display(&w[1].1),
                name::display(&w[0].0)
            )));
        }
        Ok(Renamed { inner, names })
    }

    /// How many tensors the rules changed.
    pub fn changed(&self) -> usize {
        self.names.iter().filter(|(n, o)| n != o).count()
    }

    fn old(&self, new: &[u8]) -> Option<&[u8]> {
        self.names
            .binary_search_by(|(n, _)| n.as_slice().cmp(new))
            .ok()
            .map(|i| self.names[i].1.as_slice())
    }

    fn renamed<'t>(mut t: LoadedTensor<'t>, new: &[u8]) -> LoadedTensor<'t> {
        t.info.name = new.to_vec();
        t
    }
}

impl TensorStore for Renamed<'_> {
    fn format(&self) -> Format {
        self.inner.format()
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let from = self.names.partition_point(|(n, _)| n.as_slice() < start);
        Ok(Box::new(self.names[from..].iter().map(|(new, old)| {
            let mut t: TensorInfo = self.inner.info(old)?.ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "tensor {} is gone from the input since it was listed",
                    name::display(old)
                ))
            })?;
            t.name = new.clone();
            Ok(t)
        })))
    }

    fn metadata(&self) -> Result<Metadata> {
        self.inner.metadata()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(old) = self.old(name) else {
            return Ok(None);
        };
        Ok(self.inner.load(old)?.map(|t| Self::renamed(t, name)))
    }

    fn load_many(&self, names: &[&[u8]], threads: usize) -> Result<Vec<LoadedTensor<'_>>> {
        // In order, each name asked for (an unknown one is NotFound, as the inner store says).
        let olds = names
            .iter()
            .map(|n| {
                self.old(n).ok_or_else(|| Error::NotFound {
                    name: name::display(n),
                    path: format!("{} input", self.format().name()),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let got = self.inner.load_many(&olds, threads)?;
        Ok(got
            .into_iter()
            .zip(names)
            .map(|(t, new)| Self::renamed(t, new))
            .collect())
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        let Some(old) = self.old(name) else {
            return Ok(None);
        };
        Ok(self
            .inner
            .load_slice(old, region)?
            .map(|t| Self::renamed(t, name)))
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        self.inner.verify(threads)
    }

    fn as_native(&self) -> Option<&Reader> {
        // The reader's names are not these.
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_rule_wins_renames_before_strips() {
        let r = Rules::new(
            &[
                "model.layers.=layers.".into(),
                "model.norm=final_norm".into(),
            ],
            &["model.".into()],
        )
        .unwrap();
        assert_eq!(r.apply(b"model.layers.0.w"), b"layers.0.w");
        assert_eq!(r.apply(b"model.norm.weight"), b"final_norm.weight");
        assert_eq!(r.apply(b"model.embed"), b"embed");
        assert_eq!(r.apply(b"lm_head"), b"lm_head");
        assert!(Rules::new(&["nothing".into()], &[]).is_err());
        assert!(Rules::new(&["=x".into()], &[]).is_err());
        assert!(Rules::new(&[], &["".into()]).is_err());
    }
}
