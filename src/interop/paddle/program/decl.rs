//! What a program declares of a parameter ([`ParamDecl`]) and the checks every program
//! reader ends with (names sorted, not empty, not too long; a parameter declared twice only
//! with agreeing types): shared by the `ProgramDesc` reader (`program.rs`) and the PIR JSON
//! reader (`pir_json.rs`), so that neither imports the other's file.

use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::name::{display, MAX_NAME_LEN};

/// One parameter as the program declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    /// The variable name (arbitrary bytes).
    pub name: Vec<u8>,
    /// The declared element type, when the program states one paramdex knows.
    pub dtype: Option<DType>,
    /// The declared dims (`-1` = unknown), when the program states them.
    pub dims: Option<Vec<i64>>,
}

impl ParamDecl {
    /// Folds a second declaration of the same parameter into this one: what either states is
    /// kept; a dtype or dims that contradict each other are an error (its text says how).
    fn merge(&mut self, other: ParamDecl) -> std::result::Result<(), String> {
        match (self.dtype, other.dtype) {
            (Some(a), Some(b)) if a != b => return Err(format!("{a} and {b}")),
            (None, b) => self.dtype = b,
            _ => {}
        }
        match (&mut self.dims, other.dims) {
            (Some(a), Some(b)) => {
                let agree =
                    a.len() == b.len() && a.iter().zip(&b).all(|(&x, &y)| x == y || x < 0 || y < 0);
                if !agree {
                    return Err(format!("dims {a:?} and {b:?}"));
                }
                for (x, y) in a.iter_mut().zip(b) {
                    if *x < 0 {
                        *x = y;
                    }
                }
            }
            (a @ None, b) => *a = b,
            (Some(_), None) => {}
        }
        Ok(())
    }

    /// Whether a record's dtype and shape agree with this declaration (unknowns agree).
    pub fn accepts(&self, dtype: DType, dims: &[u64]) -> bool {
        let dtype_ok = match self.dtype {
            Some(d) => d == dtype,
            None => true,
        };
        let dims_ok = match &self.dims {
            Some(want) => {
                want.len() == dims.len()
                    && want
                        .iter()
                        .zip(dims)
                        .all(|(&w, &d)| w < 0 || u64::try_from(w) == Ok(d))
            }
            None => true,
        };
        dtype_ok && dims_ok
    }
}

/// The error of a program that does not parse: its path and what is wrong.
pub(super) fn corrupt(path: &Path, detail: impl std::fmt::Display) -> Error {
    Error::corrupt("program", 0, format!("{}: {detail}", path.display()))
}

/// Sorts the declarations bytewise and rejects empty, over-long and duplicate names.
pub(super) fn finish(mut params: Vec<ParamDecl>, path: &Path) -> Result<Vec<ParamDecl>> {
    for p in &params {
        if p.name.is_empty() {
            return Err(corrupt(path, "a parameter has an empty name"));
        }
        if p.name.len() > MAX_NAME_LEN {
            return Err(corrupt(
                path,
                format!(
                    "parameter name of {} bytes is above the limit of {MAX_NAME_LEN}",
                    p.name.len()
                ),
            ));
        }
    }
    params.sort_by(|a, b| a.name.cmp(&b.name));
    // A parameter used by several ops can be declared once per use (weight tying in a static
    // graph, the shared dropout state of every RNN layer in PIR); Paddle stores it once.
    let mut unique: Vec<ParamDecl> = Vec::with_capacity(params.len());
    for p in params {
        match unique.last_mut() {
            Some(last) if last.name == p.name => last.merge(p).map_err(|detail| {
                corrupt(
                    path,
                    format!(
                        "parameter {} is declared twice with different types: {detail}",
                        display(&last.name)
                    ),
                )
            })?,
            _ => unique.push(p),
        }
    }
    Ok(unique)
}
