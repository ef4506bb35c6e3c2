//! The dependency rule of `src/` (docs/architecture.md), checked on the source text.
//!
//! Every file under `src/` belongs to a layer by its path:
//!
//! ```text
//! vocabulary (dtype element name error progress parallel proto)
//!   < format/  < record/, table/  < native/  < remote/  < interop/
//! ```
//!
//! A module may refer to its own layer and the layers below it, never above; `record/` and
//! `table/` share a rank but neither refers to the other. `lib.rs`, `prelude.rs` and `raw.rs` are
//! the facade: they re-export every layer and are exempt. The checks:
//!
//! * every `crate::…`, `super::…` and child-module path in code (`use` trees, grouped or not, and
//!   inline paths; comments, doc comments and literals are skipped) is resolved to the file that
//!   defines it, following re-exports (`crate::Reader` is `native/reader.rs`, not `lib.rs`), and
//!   no edge may point up;
//! * the graph of those edges between files has no cycle. A folder's `mod.rs` re-exporting its
//!   own children (`pub use reader::Reader;`) is not an edge, and neither is anything inside a
//!   `#[cfg(test)]` module (nothing imports a test module, so it cannot close a cycle);
//! * `interop/store.rs` (the `TensorStore` trait) imports no other interop module,
//!   `native/meta.rs` (a value type) imports neither the reader nor the writer, and nothing
//!   outside `interop/` imports `interop`.
//!
//! The functions below are unit-tested on small synthetic crates at the end of this file, so the
//! checker itself can fail.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// The rank of each layer; a module may refer to ranks at or below its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    Vocabulary,
    Format,
    /// `record/` and `table/`: one rank, two layers that must not refer to each other.
    Codec(Codec),
    Native,
    /// `remote/`: native files and checkpoints read and written through object stores.
    Remote,
    Interop,
    /// `lib.rs`, `prelude.rs`, `raw.rs`: exempt as sources, and above everything as targets.
    Facade,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Codec {
    Record,
    Table,
}

impl Layer {
    fn rank(self) -> u8 {
        match self {
            Layer::Vocabulary => 0,
            Layer::Format => 1,
            Layer::Codec(_) => 2,
            Layer::Native => 3,
            Layer::Remote => 4,
            Layer::Interop => 5,
            Layer::Facade => 6,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Layer::Vocabulary => "the vocabulary",
            Layer::Format => "format/",
            Layer::Codec(Codec::Record) => "record/",
            Layer::Codec(Codec::Table) => "table/",
            Layer::Native => "native/",
            Layer::Remote => "remote/",
            Layer::Interop => "interop/",
            Layer::Facade => "the facade (lib.rs, prelude.rs, raw.rs)",
        }
    }
}

const VOCABULARY: &[&str] = &[
    "dtype.rs",
    "element.rs",
    "error.rs",
    "progress.rs",
    "parallel.rs",
    "proto.rs",
];
const FACADE: &[&str] = &["lib.rs", "prelude.rs", "raw.rs"];

/// The layer of a file by its path relative to `src/` (`/`-separated), or `None` for a file the
/// rule does not know: a new top-level file must be given a layer here.
fn layer_of(rel: &str) -> Option<Layer> {
    let top = rel.split('/').next().unwrap_or(rel);
    if rel == top {
        if VOCABULARY.contains(&rel) {
            return Some(Layer::Vocabulary);
        }
        if FACADE.contains(&rel) {
            return Some(Layer::Facade);
        }
        return None;
    }
    match top {
        "format" => Some(Layer::Format),
        "record" => Some(Layer::Codec(Codec::Record)),
        "table" => Some(Layer::Codec(Codec::Table)),
        "native" => Some(Layer::Native),
        "remote" => Some(Layer::Remote),
        "interop" => Some(Layer::Interop),
        // Tensor names: the vocabulary, a folder since near-name suggestions joined it.
        "name" => Some(Layer::Vocabulary),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Lexing: blank out comments and literals, then split into tokens with line numbers.

/// `code` with comments (line, block, nested, doc) and string, byte-string, raw-string and char
/// literals replaced by spaces. Newlines are kept, so line numbers do not move.
fn strip(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        // Line comment (and `///`, `//!`).
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
            continue;
        }
        // Block comment, nested.
        if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            continue;
        }
        let prev_ident = i > 0 && ident_char(c[i - 1]);
        // Raw strings: r"..", r#".."#, br#".."#.
        if !prev_ident && (at(0) == 'r' || (at(0) == 'b' && at(1) == 'r')) {
            let start = if at(0) == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(start + hashes) == '#' {
                hashes += 1;
            }
            if at(start + hashes) == '"' {
                let open = start + hashes + 1;
                for _ in 0..open {
                    out.push(' ');
                }
                i += open;
                while i < c.len() {
                    let closes = c[i] == '"' && (1..=hashes).all(|h| c.get(i + h) == Some(&'#'));
                    if closes {
                        for _ in 0..=hashes {
                            out.push(' ');
                        }
                        i += hashes + 1;
                        break;
                    }
                    blank(&mut out, c[i]);
                    i += 1;
                }
                continue;
            }
        }
        // Strings and byte strings.
        if at(0) == '"' || (!prev_ident && at(0) == 'b' && at(1) == '"') {
            if at(0) == 'b' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
            while i < c.len() {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    if let Some(&next) = c.get(i + 1) {
                        blank(&mut out, next);
                    }
                    i += 2;
                    continue;
                }
                if c[i] == '"' {
                    out.push(' ');
                    i += 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
            continue;
        }
        // Char literals ('a', '\n', '\'', b'x'); a lifetime ('a) is left alone.
        if at(0) == '\'' || (!prev_ident && at(0) == 'b' && at(1) == '\'') {
            let q = usize::from(at(0) == 'b');
            let len = if at(q + 1) == '\\' {
                // Escape (`'\''`, `'\u{..}'`): past the escaped char, up to the closing quote.
                let mut k = q + 3;
                while i + k < c.len() && c[i + k] != '\'' && c[i + k] != '\n' {
                    k += 1;
                }
                (at(k) == '\'').then_some(k + 1)
            } else if at(q + 2) == '\'' && at(q + 1) != '\'' {
                Some(q + 3)
            } else {
                None
            };
            if let Some(len) = len {
                for _ in 0..len {
                    out.push(' ');
                }
                i += len;
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Tokens of stripped code: identifiers (with `r#` removed), `::`, and single punctuation.
fn tokenize(stripped: &str) -> Vec<Token> {
    let c: Vec<char> = stripped.chars().collect();
    let mut toks = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphabetic() || ch == '_' {
            if ch == 'r' && c.get(i + 1) == Some(&'#') {
                i += 2;
            }
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            toks.push(Token {
                tok: Tok::Ident(c[start..i].iter().collect()),
                line,
            });
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            toks.push(Token {
                tok: Tok::Path,
                line,
            });
            i += 2;
        } else {
            toks.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    toks
}

// ---------------------------------------------------------------------------------------------
// Paths: every module path a file refers to.

/// A module path from the crate root, e.g. `["native", "reader"]`; `[]` is `lib.rs`.
type ModPath = Vec<String>;

/// One path found in a file, made absolute (`crate::` implied).
#[derive(Clone, Debug)]
struct PathRef {
    line: usize,
    /// The module (file plus inline modules) the path appears in.
    module: ModPath,
    path: Vec<String>,
    /// From a `use` item, and with `pub` visibility of some kind.
    pub_use: bool,
    /// Inside a `#[cfg(test)]` module.
    in_test: bool,
    /// For a `use` item: the name it binds (its last segment, or the `as` alias).
    binds: Option<String>,
}

/// What one file contributes: its inline modules and the paths it refers to.
#[derive(Debug, Default)]
struct Scan {
    inline_modules: Vec<ModPath>,
    refs: Vec<PathRef>,
}

/// The module path of a file relative to `src/`: `native/reader.rs` → `[native, reader]`,
/// `native/mod.rs` → `[native]`, `lib.rs` → `[]`.
fn module_of(rel: &str) -> ModPath {
    let rel = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") || rel == "lib" {
        parts.pop();
    }
    parts
}

struct Parser<'t> {
    toks: &'t [Token],
    i: usize,
}

impl Parser<'_> {
    fn ident(&self, k: usize) -> Option<&str> {
        match self.toks.get(self.i + k).map(|t| &t.tok) {
            Some(Tok::Ident(s)) => Some(s),
            _ => None,
        }
    }
    fn is(&self, k: usize, tok: &Tok) -> bool {
        self.toks.get(self.i + k).map(|t| &t.tok) == Some(tok)
    }
    fn line(&self) -> usize {
        self.toks.get(self.i).map_or(0, |t| t.line)
    }

    /// Parses a use tree at the cursor, appending `(path, bound name, line)` per leaf.
    fn use_tree(&mut self, prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>, usize)>) {
        let mut path = prefix.to_vec();
        if self.is(0, &Tok::Path) {
            // A leading `::` (extern crate path).
            path.push("::".into());
            self.i += 1;
        }
        loop {
            if self.is(0, &Tok::Punct('{')) {
                self.i += 1;
                while !self.is(0, &Tok::Punct('}')) && self.i < self.toks.len() {
                    self.use_tree(&path, out);
                    if self.is(0, &Tok::Punct(',')) {
                        self.i += 1;
                    }
                }
                self.i += 1;
                return;
            }
            if self.is(0, &Tok::Punct('*')) {
                let line = self.line();
                self.i += 1;
                out.push((path, None, line));
                return;
            }
            let Some(seg) = self.ident(0).map(str::to_string) else {
                return;
            };
            let line = self.line();
            self.i += 1;
            if self.is(0, &Tok::Path) {
                path.push(seg);
                self.i += 1;
                continue;
            }
            // A leaf: `x`, `x as y`, `self`.
            let mut binds = if seg == "self" {
                path.last().cloned()
            } else {
                Some(seg.clone())
            };
            if seg != "self" {
                path.push(seg);
            }
            if self.ident(0) == Some("as") {
                binds = self.ident(1).map(str::to_string);
                self.i += 2;
            }
            out.push((path, binds, line));
            return;
        }
    }
}

/// Makes a path found in module `module` absolute, or `None` when it leaves the crate (an
/// extern crate, `std`, a local name). `children` says which names are child modules of a module.
fn absolute(
    path: &[String],
    module: &[String],
    is_child: &dyn Fn(&[String], &str) -> bool,
) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(module.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = module.len().checked_sub(ups)?;
            Some(module[..base].iter().chain(&path[ups..]).cloned().collect())
        }
        "::" => None,
        name if is_child(module, name) => Some(module.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

/// Finds every path in one file. `file_module` is the file's module path; `is_child(m, name)`
/// says whether `name` is a child module of `m` (a file, or an inline module of this file).
fn scan(code: &str, file_module: &[String], is_child: &dyn Fn(&[String], &str) -> bool) -> Scan {
    let toks = tokenize(&strip(code));
    let mut scan = Scan::default();
    // Inline modules open at a brace depth: (depth, is test).
    let mut stack: Vec<(usize, bool)> = Vec::new();
    let mut module: ModPath = file_module.to_vec();
    let mut depth = 0usize;
    let mut p = Parser { toks: &toks, i: 0 };
    // Names of this file's inline modules, known as soon as they are opened.
    let mut inline: BTreeSet<ModPath> = BTreeSet::new();
    while p.i < toks.len() {
        let in_test = stack.iter().any(|&(_, t)| t);
        let known = inline.clone();
        let is_child_here = |m: &[String], name: &str| {
            let child: ModPath = m.iter().cloned().chain([name.into()]).collect();
            is_child(m, name) || known.contains(&child)
        };
        match &toks[p.i].tok {
            Tok::Punct('{') => {
                depth += 1;
                p.i += 1;
            }
            Tok::Punct('}') => {
                if stack.last().is_some_and(|&(d, _)| d == depth) {
                    stack.pop();
                    module.pop();
                }
                depth = depth.saturating_sub(1);
                p.i += 1;
            }
            Tok::Ident(kw) if kw == "mod" && p.ident(1).is_some() && p.is(2, &Tok::Punct('{')) => {
                let name = p.ident(1).unwrap_or_default().to_string();
                let test = cfg_test_before(&toks, p.i);
                module.push(name);
                inline.insert(module.clone());
                scan.inline_modules.push(module.clone());
                depth += 1;
                stack.push((depth, test));
                p.i += 3;
            }
            Tok::Ident(kw) if kw == "use" => {
                let pub_use = is_pub_before(&toks, p.i);
                p.i += 1;
                let mut leaves = Vec::new();
                p.use_tree(&[], &mut leaves);
                for (path, binds, line) in leaves {
                    if let Some(abs) = absolute(&path, &module, &is_child_here) {
                        scan.refs.push(PathRef {
                            line,
                            module: module.clone(),
                            path: abs,
                            pub_use,
                            in_test,
                            binds,
                        });
                    }
                }
            }
            Tok::Ident(first) => {
                let after_sep = p.i > 0
                    && matches!(
                        toks[p.i - 1].tok,
                        Tok::Path | Tok::Punct('.') | Tok::Punct('$')
                    );
                let starts = matches!(first.as_str(), "crate" | "super" | "self")
                    || is_child_here(&module, first);
                if after_sep || !starts || !p.is(1, &Tok::Path) {
                    p.i += 1;
                    continue;
                }
                let line = p.line();
                let mut path = vec![first.clone()];
                p.i += 1;
                while p.is(0, &Tok::Path) {
                    match p.ident(1) {
                        Some(seg) => {
                            path.push(seg.to_string());
                            p.i += 2;
                        }
                        None => break, // `::<` or `::{`
                    }
                }
                if let Some(abs) = absolute(&path, &module, &is_child_here) {
                    scan.refs.push(PathRef {
                        line,
                        module: module.clone(),
                        path: abs,
                        pub_use: false,
                        in_test,
                        binds: None,
                    });
                }
            }
            _ => p.i += 1,
        }
    }
    scan
}

/// Whether the item starting at `toks[at]` is preceded by `#[cfg(test)]` (other attributes and
/// `pub` may sit between).
fn cfg_test_before(toks: &[Token], at: usize) -> bool {
    let mut k = at;
    skip_visibility_back(toks, &mut k);
    while k > 0 && toks[k - 1].tok == Tok::Punct(']') {
        // Find the matching `#[`.
        let end = k - 1;
        let mut j = end;
        while j > 0 && toks[j].tok != Tok::Punct('[') {
            j -= 1;
        }
        let inner: Vec<&Tok> = toks[j + 1..end].iter().map(|t| &t.tok).collect();
        let is_cfg_test = inner
            == [
                &Tok::Ident("cfg".into()),
                &Tok::Punct('('),
                &Tok::Ident("test".into()),
                &Tok::Punct(')'),
            ];
        if is_cfg_test {
            return true;
        }
        if j == 0 || toks[j - 1].tok != Tok::Punct('#') {
            return false;
        }
        k = j - 1;
    }
    false
}

/// Whether the item at `toks[at]` has a `pub`, `pub(crate)`, `pub(super)`, ... visibility.
fn is_pub_before(toks: &[Token], at: usize) -> bool {
    let mut k = at;
    skip_visibility_back(toks, &mut k);
    k != at
}

fn skip_visibility_back(toks: &[Token], k: &mut usize) {
    let tok = |j: usize| toks.get(j).map(|t| &t.tok);
    if *k >= 1 && tok(*k - 1) == Some(&Tok::Ident("pub".into())) {
        *k -= 1;
    } else if *k >= 4
        && tok(*k - 1) == Some(&Tok::Punct(')'))
        && tok(*k - 3) == Some(&Tok::Punct('('))
        && tok(*k - 4) == Some(&Tok::Ident("pub".into()))
    {
        *k -= 4;
    }
}

// ---------------------------------------------------------------------------------------------
// The crate: files, re-exports, edges.

/// One reference from a file to another file.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    line: usize,
    to: String,
    /// The path as written, made absolute (`crate::native::reader::Reader`).
    path: String,
    in_test: bool,
}

struct Crate {
    /// Module path → file (relative to `src/`) holding it; inline modules map to their file.
    modules: BTreeMap<ModPath, String>,
    /// Module path → names bound by its `use` items → the absolute path they stand for.
    aliases: HashMap<ModPath, HashMap<String, Vec<String>>>,
    /// Per file: the paths it refers to.
    refs: BTreeMap<String, Vec<PathRef>>,
}

impl Crate {
    /// Builds the model from `(path relative to src/, source)` pairs.
    fn new(files: &[(String, String)]) -> Crate {
        let mut modules: BTreeMap<ModPath, String> = files
            .iter()
            .map(|(rel, _)| (module_of(rel), rel.clone()))
            .collect();
        let file_modules = modules.clone();
        let is_child = |m: &[String], name: &str| {
            file_modules.contains_key(&m.iter().cloned().chain([name.into()]).collect::<Vec<_>>())
        };
        let mut refs = BTreeMap::new();
        let mut aliases: HashMap<ModPath, HashMap<String, Vec<String>>> = HashMap::new();
        for (rel, code) in files {
            let scan = scan(code, &module_of(rel), &is_child);
            for m in scan.inline_modules {
                modules.entry(m).or_insert_with(|| rel.clone());
            }
            for r in &scan.refs {
                if let Some(name) = &r.binds {
                    aliases
                        .entry(r.module.clone())
                        .or_default()
                        .insert(name.clone(), r.path.clone());
                }
            }
            refs.insert(rel.clone(), scan.refs);
        }
        Crate {
            modules,
            aliases,
            refs,
        }
    }

    /// The file that defines what `path` names, following `use` re-exports (at most a few hops).
    fn resolve(&self, path: &[String]) -> String {
        let mut path = path.to_vec();
        for _ in 0..16 {
            let mut m: ModPath = Vec::new();
            let mut i = 0;
            while i < path.len() {
                let next: ModPath = m.iter().chain([&path[i]]).cloned().collect();
                if !self.modules.contains_key(&next) {
                    break;
                }
                m = next;
                i += 1;
            }
            let alias = path
                .get(i)
                .and_then(|name| self.aliases.get(&m).and_then(|a| a.get(name)));
            match alias {
                // A name bound by `use` in that module: follow it (unless it names itself).
                Some(target) if *target != path[..=i] => {
                    path = target.iter().chain(&path[i + 1..]).cloned().collect();
                }
                _ => return self.modules[&m].clone(),
            }
        }
        self.modules[&Vec::new()].clone()
    }

    /// Every edge from one file to another. Skipped: references within a file, and a `mod.rs`
    /// re-exporting (`pub use`) its own descendants.
    fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (from, refs) in &self.refs {
            let from_module = module_of(from);
            let is_facade_file = from.ends_with("mod.rs") || from == "lib.rs";
            for r in refs {
                let to = self.resolve(&r.path);
                if to == *from {
                    continue;
                }
                let reexports_child = is_facade_file
                    && r.pub_use
                    && r.path.len() > from_module.len()
                    && r.path.starts_with(&from_module);
                if reexports_child {
                    continue;
                }
                edges.push(Edge {
                    from: from.clone(),
                    line: r.line,
                    to,
                    path: format!("crate::{}", r.path.join("::")),
                    in_test: r.in_test,
                });
            }
        }
        edges
    }
}

// ---------------------------------------------------------------------------------------------
// The rules.

/// Files with no layer, and edges that point up (or sideways between record and table).
fn layer_violations(files: &[String], edges: &[Edge]) -> Vec<String> {
    let mut bad = Vec::new();
    for f in files {
        if layer_of(f).is_none() {
            bad.push(format!(
                "src/{f}: no layer; give it one in tests/layers.rs (and docs/architecture.md)"
            ));
        }
    }
    for e in edges {
        let (Some(from), Some(to)) = (layer_of(&e.from), layer_of(&e.to)) else {
            // A file with no layer is reported above.
            continue;
        };
        if from == Layer::Facade {
            continue;
        }
        let why = if to.rank() > from.rank() {
            format!("{} refers to {}, a layer above it", from.name(), to.name())
        } else if let (Layer::Codec(a), Layer::Codec(b)) = (from, to) {
            if a == b {
                continue;
            }
            format!(
                "{} and {} share a rank and must not refer to each other",
                from.name(),
                to.name()
            )
        } else {
            continue;
        };
        bad.push(format!(
            "src/{}:{}: {} -> {} ({}): {why}",
            e.from, e.line, e.from, e.to, e.path
        ));
    }
    bad
}

/// Import cycles between files, from the edges outside test modules; each one named as
/// `a.rs -> b.rs -> a.rs` with the line of every step.
fn cycles(edges: &[Edge]) -> Vec<String> {
    // The first edge (lowest line) for each (from, to), to name the step.
    let mut graph: BTreeMap<&str, BTreeMap<&str, &Edge>> = BTreeMap::new();
    for e in edges.iter().filter(|e| !e.in_test) {
        let step = graph.entry(&e.from).or_default();
        match step.get(e.to.as_str()) {
            Some(old) if old.line <= e.line => {}
            _ => {
                step.insert(&e.to, e);
            }
        }
    }
    // Strongly connected components (Tarjan), then one cycle through each non-trivial one.
    let nodes: BTreeSet<&str> = graph
        .iter()
        .flat_map(|(f, ts)| std::iter::once(*f).chain(ts.keys().copied()))
        .collect();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut low: HashMap<&str, usize> = HashMap::new();
    let mut on_stack: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&str> = Vec::new();
    let mut sccs: Vec<Vec<&str>> = Vec::new();
    fn connect<'a>(
        v: &'a str,
        graph: &BTreeMap<&'a str, BTreeMap<&'a str, &Edge>>,
        index: &mut HashMap<&'a str, usize>,
        low: &mut HashMap<&'a str, usize>,
        on_stack: &mut BTreeSet<&'a str>,
        stack: &mut Vec<&'a str>,
        sccs: &mut Vec<Vec<&'a str>>,
    ) {
        let n = index.len();
        index.insert(v, n);
        low.insert(v, n);
        stack.push(v);
        on_stack.insert(v);
        for &w in graph.get(v).map(|t| t.keys()).into_iter().flatten() {
            if !index.contains_key(w) {
                connect(w, graph, index, low, on_stack, stack, sccs);
                low.insert(v, low[v].min(low[w]));
            } else if on_stack.contains(w) {
                low.insert(v, low[v].min(index[w]));
            }
        }
        if low[v] == index[v] {
            let mut scc = Vec::new();
            while let Some(w) = stack.pop() {
                on_stack.remove(w);
                scc.push(w);
                if w == v {
                    break;
                }
            }
            sccs.push(scc);
        }
    }
    for &v in &nodes {
        if !index.contains_key(v) {
            connect(
                v,
                &graph,
                &mut index,
                &mut low,
                &mut on_stack,
                &mut stack,
                &mut sccs,
            );
        }
    }
    let mut found = Vec::new();
    for scc in sccs.into_iter().filter(|s| s.len() > 1) {
        let members: BTreeSet<&str> = scc.iter().copied().collect();
        let start = *members.iter().next().unwrap_or(&"");
        // Breadth-first search inside the component for the shortest way back to `start`.
        let mut prev: BTreeMap<&str, &Edge> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut back: Option<&Edge> = None;
        while let Some(v) = queue.pop_front() {
            for (&w, &e) in graph.get(v).into_iter().flatten() {
                if !members.contains(w) {
                    continue;
                }
                if w == start {
                    back = back.or(Some(e));
                } else if w != start && !prev.contains_key(w) {
                    prev.insert(w, e);
                    queue.push_back(w);
                }
            }
            if back.is_some() {
                break;
            }
        }
        let mut steps = Vec::new();
        let mut e = back;
        while let Some(edge) = e {
            steps.push(edge);
            e = (edge.from != start).then(|| prev[edge.from.as_str()]);
        }
        steps.reverse();
        let text: Vec<String> = steps
            .iter()
            .map(|e| format!("src/{}:{} ({})", e.from, e.line, e.path))
            .collect();
        found.push(format!(
            "import cycle through {} files: {} -> back to src/{start}",
            members.len(),
            text.join(" -> ")
        ));
    }
    found
}

/// The rules about single modules that the layer ranks cannot express.
fn module_rules(edges: &[Edge]) -> Vec<String> {
    let mut bad = Vec::new();
    for e in edges {
        let site = format!(
            "src/{}:{}: {} -> {} ({})",
            e.from, e.line, e.from, e.to, e.path
        );
        if e.from == "interop/store.rs" && e.to.starts_with("interop/") {
            bad.push(format!(
                "{site}: interop/store.rs (the TensorStore trait and its types) depends on no \
                 format and not on the registry"
            ));
        }
        if e.from == "native/meta.rs" && (e.to == "native/reader.rs" || e.to == "native/writer.rs")
        {
            bad.push(format!(
                "{site}: native/meta.rs is a value type; engine operations on metadata belong in \
                 native/rewrite.rs"
            ));
        }
        let outside = !e.from.starts_with("interop/") && layer_of(&e.from) != Some(Layer::Facade);
        if outside && e.to.starts_with("interop/") {
            bad.push(format!(
                "{site}: only interop/ (and the facade) may import interop"
            ));
        }
    }
    bad
}

/// Every `.rs` file under `src/`, as `(path relative to src/, source)`.
fn read_src() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).expect("under src/");
                let rel = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                let code = std::fs::read_to_string(&p)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
                out.push((rel, code));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

fn check(what: &str, problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{what} ({} found; see docs/architecture.md):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn no_module_refers_to_a_layer_above_its_own() {
    let files = read_src();
    let krate = Crate::new(&files);
    let names: Vec<String> = files.iter().map(|(f, _)| f.clone()).collect();
    // The checker sees the real tree: the engine is found under native/, and edges exist.
    assert!(names.iter().any(|f| f == "native/reader.rs"), "{names:?}");
    let edges = krate.edges();
    assert!(
        edges
            .iter()
            .any(|e| e.from == "native/mapped.rs" && e.to == "table/reader.rs"),
        "the reader's use of the table was not seen"
    );
    check(
        "modules referring to a layer above their own",
        layer_violations(&names, &edges),
    );
}

#[test]
fn no_import_cycles() {
    let edges = Crate::new(&read_src()).edges();
    check("import cycles between files", cycles(&edges));
}

#[test]
fn module_specific_rules_hold() {
    let edges = Crate::new(&read_src()).edges();
    check("module rules broken", module_rules(&edges));
}

// ---------------------------------------------------------------------------------------------
// The checker, tested on synthetic crates.

fn krate(files: &[(&str, &str)]) -> Crate {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(f, c)| (f.to_string(), c.to_string()))
        .collect();
    Crate::new(&files)
}

fn edge_list(c: &Crate) -> Vec<String> {
    let mut v: Vec<String> = c
        .edges()
        .iter()
        .map(|e| format!("{}:{} -> {}", e.from, e.line, e.to))
        .collect();
    v.sort();
    v
}

#[test]
fn strip_blanks_comments_and_literals_and_keeps_lines() {
    let code = "a // crate::x\n/* crate::y /* nested */ crate::z */ b\n\"crate::s\\\"\" r#\"crate::r\"# 'c' '\\'' 'l x b'q' br\"q\" c\n/// crate::doc\nd";
    let s = strip(code);
    assert_eq!(s.lines().count(), code.lines().count());
    assert!(!s.contains("crate"), "{s:?}");
    for kept in ["a", "b", "'l x", "c", "d"] {
        assert!(s.contains(kept), "{kept} lost: {s:?}");
    }
}

#[test]
fn grouped_and_inline_paths_are_all_found() {
    let c = krate(&[
        ("lib.rs", "mod error; mod format; mod native;"),
        ("error.rs", ""),
        ("format/mod.rs", "mod fixed; pub use fixed::get;"),
        ("format/fixed.rs", "pub fn get() {}"),
        ("native/mod.rs", "mod reader; mod meta;"),
        ("native/meta.rs", ""),
        (
            "native/reader.rs",
            "use crate::{error::Error, format::{self}};\n\
             fn f() { crate::native::meta::M::new(); let _ = \"crate::table\"; }\n\
             use super::meta as m;",
        ),
    ]);
    assert_eq!(
        edge_list(&c),
        [
            "native/reader.rs:1 -> error.rs",
            "native/reader.rs:1 -> format/mod.rs",
            "native/reader.rs:2 -> native/meta.rs",
            "native/reader.rs:3 -> native/meta.rs",
        ]
    );
}

#[test]
fn reexports_are_followed_and_are_not_edges_themselves() {
    let c = krate(&[
        ("lib.rs", "mod native; mod interop; pub use native::Reader;"),
        ("native/mod.rs", "mod reader; pub use reader::Reader;"),
        ("native/reader.rs", "pub struct Reader;"),
        ("interop/mod.rs", "use crate::Reader;"),
    ]);
    // `crate::Reader` is lib.rs's re-export of native/mod.rs's re-export of native/reader.rs;
    // native/mod.rs re-exporting its child is not an edge, nor are the facade's.
    assert_eq!(edge_list(&c), ["interop/mod.rs:1 -> native/reader.rs"]);
}

#[test]
fn an_upward_edge_fails_naming_file_line_and_edge() {
    let c = krate(&[
        ("lib.rs", "mod table; mod native; mod record;"),
        ("native/mod.rs", "pub struct Reader;"),
        ("record/mod.rs", "fn ok() {}"),
        (
            "table/mod.rs",
            "// crate::native::Reader in a comment is fine\nfn f() {\n    let _ = crate::native::Reader;\n}\nuse crate::record::ok;",
        ),
        ("native/extra.rs", ""),
        ("stray.rs", ""),
    ]);
    let files: Vec<String> = c.modules.values().cloned().collect();
    let bad = layer_violations(&files, &c.edges());
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(bad[0].starts_with("src/stray.rs: no layer"), "{}", bad[0]);
    assert!(
        bad[1].starts_with(
            "src/table/mod.rs:3: table/mod.rs -> native/mod.rs (crate::native::Reader)"
        ),
        "{}",
        bad[1]
    );
    assert!(
        bad[2].contains("src/table/mod.rs:5") && bad[2].contains("share a rank"),
        "{}",
        bad[2]
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let c = krate(&[
        ("lib.rs", "mod native;"),
        ("native/mod.rs", "mod a; mod b; mod c; pub use a::A;"),
        ("native/a.rs", "use super::b::B;\npub struct A;"),
        ("native/b.rs", "\nuse crate::native::c::C; pub struct B;"),
        (
            "native/c.rs",
            "pub struct C;\n\n fn f() { let _ = crate::native::A; }",
        ),
    ]);
    let edges = c.edges();
    let found = cycles(&edges);
    assert_eq!(
        found,
        [
            "import cycle through 3 files: src/native/a.rs:1 (crate::native::b::B) -> \
          src/native/b.rs:2 (crate::native::c::C) -> src/native/c.rs:3 (crate::native::A) -> \
          back to src/native/a.rs"
        ]
    );
    // The same edges from a test module close no cycle: nothing imports a test module.
    let c = krate(&[
        ("lib.rs", "mod native;"),
        ("native/mod.rs", "mod a; mod b; pub use a::A;"),
        ("native/a.rs", "use super::b::B;"),
        (
            "native/b.rs",
            "#[cfg(test)]\nmod tests { use crate::native::A; }",
        ),
    ]);
    assert_eq!(
        edge_list(&c),
        [
            "native/a.rs:1 -> native/b.rs",
            "native/b.rs:2 -> native/a.rs"
        ]
    );
    assert!(cycles(&c.edges()).is_empty());
}

#[test]
fn a_registry_calling_its_formats_is_an_edge() {
    // interop/mod.rs re-exports store (not an edge) but calls tf::open in code (an edge), so a
    // format importing the registry closes a cycle.
    let c = krate(&[
        ("lib.rs", "pub mod interop;"),
        ("interop/mod.rs", "mod store; mod tf; pub use store::S;\nconst O: &[fn()] = &[tf::open];\npub fn open_any() {}"),
        ("interop/store.rs", "pub struct S;\nfn f() { crate::interop::tf::open(); }"),
        ("interop/tf/mod.rs", "pub fn open() { crate::interop::open_any(); }"),
    ]);
    let edges = c.edges();
    assert_eq!(
        edge_list(&c),
        [
            "interop/mod.rs:2 -> interop/tf/mod.rs",
            "interop/store.rs:2 -> interop/tf/mod.rs",
            "interop/tf/mod.rs:1 -> interop/mod.rs",
        ]
    );
    assert_eq!(cycles(&edges).len(), 1);
    let rules = module_rules(&edges);
    assert_eq!(rules.len(), 1, "{rules:#?}");
    assert!(
        rules[0].starts_with("src/interop/store.rs:2"),
        "{}",
        rules[0]
    );
}

#[test]
fn module_rules_fail_on_synthetic_breaches() {
    let c = krate(&[
        ("lib.rs", "mod native; mod interop; mod table;"),
        ("native/mod.rs", "mod meta; mod reader; mod writer;"),
        (
            "native/meta.rs",
            "use super::reader::R;\nuse crate::native::writer::W;",
        ),
        ("native/reader.rs", "pub struct R;"),
        ("native/writer.rs", "pub struct W;"),
        ("interop/mod.rs", "pub struct F;"),
        ("table/mod.rs", "fn f() { let _ = crate::interop::F; }"),
    ]);
    let rules = module_rules(&c.edges());
    assert_eq!(rules.len(), 3, "{rules:#?}");
    assert!(rules[0].starts_with("src/native/meta.rs:1"), "{}", rules[0]);
    assert!(rules[1].starts_with("src/native/meta.rs:2"), "{}", rules[1]);
    assert!(rules[2].starts_with("src/table/mod.rs:1"), "{}", rules[2]);
}
