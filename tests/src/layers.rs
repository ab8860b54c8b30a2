//! The import graph of one folder of ck's library, read from the sources with `syn`: every path
//! in every file counts, not only `use` lines (an inline `crate::supervisor::x::Y` in an
//! expression, a type or a macro's tokens is an import of `x` too). Each child of the folder (a
//! sub-folder or a file) is one node, the folder's own `mod.rs` another ([`OWN`]).
//! `tests/tests/layers.rs` holds the graph to the layer order ARCHITECTURE.md states: no cycle,
//! and no path that runs up a layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The node that stands for the folder's own `mod.rs` (what it declares itself).
pub const OWN: &str = "mod.rs";

/// One path from a file of one node to an item of another.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The node the path is written in.
    pub from: String,
    /// The node the path names.
    pub to: String,
    /// The file the path is written in, relative to the library's `src`.
    pub file: PathBuf,
    /// Its line (1-based).
    pub line: usize,
    /// The path as written, resolved to the crate's root (`crate::a::b`).
    pub path: String,
}

impl std::fmt::Display for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} -> {} ({})",
            self.file.display(),
            self.line,
            self.from,
            self.to,
            self.path
        )
    }
}

/// Every path between two different nodes of `folder` (module path segments under the crate
/// root, as `["supervisor"]`) in the library whose sources are at `src`.
pub fn edges(src: &Path, folder: &[&str]) -> Result<Vec<Edge>, String> {
    let dir = folder.iter().fold(src.to_path_buf(), |d, s| d.join(s));
    let nodes = nodes_of(&dir)?;
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files.sort();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .filter_map(|f| f.strip_prefix(src).ok())
        .map(module_of)
        .collect();
    let mut out = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(src)
            .map_err(|e| e.to_string())?
            .to_path_buf();
        let module = module_of(&rel);
        let from = node_of(&module, folder, &nodes).unwrap_or_else(|| OWN.to_string());
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", rel.display()))?;
        let syntax = syn::parse_file(&text).map_err(|e| format!("{}: {e}", rel.display()))?;
        let mut reader = PathReader {
            module,
            modules: &modules,
            found: Vec::new(),
        };
        reader.visit_file(&syntax);
        for (path, line) in reader.found {
            let Some(to) = node_of(&path, folder, &nodes) else {
                continue;
            };
            if to != from {
                out.push(Edge {
                    from: from.clone(),
                    to,
                    file: rel.clone(),
                    line,
                    path: format!("crate::{}", path.join("::")),
                });
            }
        }
    }
    Ok(out)
}

/// The groups of nodes that import each other in a circle (strongly connected components of
/// more than one node), each sorted, found with Tarjan's algorithm.
pub fn cycles(edges: &[Edge]) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    let mut tarjan = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    tarjan.found
}

/// The edges that run up `layers` (lowest first; a node of layer `i` may name nodes of layers
/// `0..=i`), and the nodes no layer lists (as `Err`).
pub fn upward<'e>(edges: &'e [Edge], layers: &[&[&str]]) -> Result<Vec<&'e Edge>, Vec<String>> {
    let rank = |node: &str| layers.iter().position(|l| l.contains(&node));
    let unlisted: BTreeSet<String> = edges
        .iter()
        .flat_map(|e| [&e.from, &e.to])
        .filter(|n| rank(n).is_none())
        .cloned()
        .collect();
    if !unlisted.is_empty() {
        return Err(unlisted.into_iter().collect());
    }
    Ok(edges
        .iter()
        .filter(|e| rank(&e.to) > rank(&e.from))
        .collect())
}

/// Tarjan's strongly connected components over a small graph of names.
struct Tarjan<'g> {
    graph: &'g BTreeMap<&'g str, BTreeSet<&'g str>>,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    next: usize,
    found: Vec<Vec<String>>,
}

impl<'g> Tarjan<'g> {
    fn visit(&mut self, node: &'g str) {
        self.index.insert(node, self.next);
        self.low.insert(node, self.next);
        self.next += 1;
        self.stack.push(node);
        self.on_stack.insert(node);
        for &next in &self.graph[node] {
            if !self.index.contains_key(next) {
                self.visit(next);
                let low = self.low[node].min(self.low[next]);
                self.low.insert(node, low);
            } else if self.on_stack.contains(next) {
                let low = self.low[node].min(self.index[next]);
                self.low.insert(node, low);
            }
        }
        if self.low[node] == self.index[node] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack.remove(top);
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                self.found.push(component);
            }
        }
    }
}

/// The names of `dir`'s children that are modules, one node each: sub-folders and `.rs` files
/// but `mod.rs` (which is [`OWN`]).
pub fn nodes_of(dir: &Path) -> Result<BTreeSet<String>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut nodes = BTreeSet::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.is_dir() || (path.extension().is_some_and(|e| e == "rs") && stem != "mod") {
            nodes.insert(stem.to_string());
        }
    }
    Ok(nodes)
}

/// Every `.rs` file under `dir`, recursively, skipping `target` and hidden directories.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file (relative to `src`): `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut segments: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
        segments.pop();
    }
    segments
}

/// The node of `folder` a module path lies in: the child named after the folder's segments,
/// [`OWN`] for the folder itself and for an item of its `mod.rs`, `None` outside the folder.
fn node_of(path: &[String], folder: &[&str], nodes: &BTreeSet<String>) -> Option<String> {
    if path.len() < folder.len() || path.iter().zip(folder).any(|(a, b)| a != b) {
        return None;
    }
    match path.get(folder.len()) {
        Some(child) if nodes.contains(child) => Some(child.clone()),
        _ => Some(OWN.to_string()),
    }
}

/// Collects every path of one file, resolved to the crate's root, with its line.
struct PathReader<'m> {
    /// The module being read (grows inside an inline `mod`).
    module: Vec<String>,
    /// Every module of the folder's files, so that `child::x` in `mod.rs` resolves to `self`.
    modules: &'m BTreeSet<Vec<String>>,
    /// Resolved paths and their lines.
    found: Vec<(Vec<String>, usize)>,
}

impl PathReader<'_> {
    /// Records `segments` (as written, from the module being read) if it starts at `crate`,
    /// `super`, `self` or a child module of the module being read (which Rust resolves from
    /// `self`). A path that starts with another name is a local item, an import already
    /// recorded by its `use`, or another crate: none is a new edge.
    fn record(&mut self, segments: &[String], line: usize) {
        let mut resolved = self.module.clone();
        let mut rest = segments;
        match segments.first().map(String::as_str) {
            Some("crate") => {
                resolved.clear();
                rest = &segments[1..];
            }
            Some("self") => rest = &segments[1..],
            // One name alone is a local (a variable named like a module), never a module.
            Some(first) if segments.len() > 1 && self.is_child(first) => {}
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    resolved.pop();
                    rest = &rest[1..];
                }
            }
            _ => return,
        }
        resolved.extend(rest.iter().filter(|s| *s != "self").cloned());
        self.found.push((resolved, line));
    }

    /// Whether `name` is a module declared in the module being read.
    fn is_child(&self, name: &str) -> bool {
        let mut child = self.module.clone();
        child.push(name.to_string());
        self.modules.contains(&child)
    }

    /// Every path of a `use` tree under `prefix`.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                full.push(n.ident.to_string());
                self.record(&full, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                full.push(r.ident.to_string());
                self.record(&full, r.ident.span().start().line);
            }
            syn::UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                let full = prefix.clone();
                self.record(&full, line);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(tree, prefix);
                }
            }
        }
    }

    /// Paths in a macro's tokens (which `syn` leaves unparsed): `crate`, `super`, `self` or a
    /// child module followed by `::` and names.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id)
                    if ["crate", "super", "self"].contains(&&*id.to_string())
                        || self.is_child(&id.to_string()) =>
                {
                    let line = id.span().start().line;
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (trees.get(j), trees.get(j + 1), trees.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.record(&segments, line);
                    }
                    i = j - 1;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl PathReader<'_> {
    /// The string literals of `tokens` that are paths from `crate`, `super` or `self`.
    fn strings(&mut self, tokens: TokenStream) {
        for tree in tokens {
            match tree {
                TokenTree::Group(g) => self.strings(g.stream()),
                TokenTree::Literal(lit) => {
                    let text = lit.to_string();
                    let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"'))
                    else {
                        continue;
                    };
                    let segments: Vec<String> = inner.split("::").map(str::to_string).collect();
                    let is_path = segments.len() > 1
                        && segments.iter().all(|s| {
                            !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
                        });
                    if is_path {
                        self.record(&segments, lit.span().start().line);
                    }
                }
                _ => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for PathReader<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }

    /// `pub(super)` and `pub(in path)` name where an item is seen, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, &mut Vec::new());
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.record(&segments, line);
        syn::visit::visit_path(self, p);
    }

    /// An attribute's string that is a path (`#[serde(with = "crate::a::b")]`) names it too.
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if let syn::Meta::List(list) = &a.meta {
            self.strings(list.tokens.clone());
        }
        syn::visit::visit_attribute(self, a);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}
