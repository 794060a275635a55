//! Layering: a workspace crate may depend only on crates listed before it in the root
//! Cargo.toml `members` (lowest layer first; see docs/ARCHITECTURE.md). Every dependency
//! kind counts (normal, dev, build). The test reads `cargo metadata` and fails naming
//! each offending edge. The two crates beside the engine, `tarn-daemon` and `tarn-pacer`,
//! are listed first, so this one rule keeps them off the engine with no special case.
//!
//! The FUSE layer speaks only to `dataset` and `pool` (ARCHITECTURE.md: it never
//! bypasses the dataset API): neither its Cargo.toml nor its sources may reach an engine
//! crate listed below `dataset`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One workspace crate: its package name and its place in `members`.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    path: String,
    index: usize,
}

/// An edge `from -> to` of kind `kind` ("normal", "dev", "build").
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    kind: String,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root exists")
}

/// The `members = [...]` list of the root Cargo.toml, in order.
fn members_in_order(root_toml: &str) -> Vec<String> {
    // Strip comments first so a `#` line cannot add or hide a member.
    let text: String = root_toml
        .lines()
        .map(|l| match l.find('#') {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let start = text
        .match_indices("members")
        .map(|(i, _)| i)
        .find(|&i| {
            let line_start = text[..i].rfind('\n').map_or(0, |n| n + 1);
            text[line_start..i].trim().is_empty() && text[i + 7..].trim_start().starts_with('=')
        })
        .expect("root Cargo.toml has a `members = [...]` line");
    let open = start + text[start..].find('[').expect("members = [");
    let close = open + text[open..].find(']').expect("members list is closed");
    text[open + 1..close]
        .split(',')
        .map(|s| s.trim().trim_matches('"').trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Every edge that points at a crate not listed before its source, as messages.
fn violations(members: &[Member], edges: &[Edge]) -> Vec<String> {
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut bad = Vec::new();
    for e in edges {
        let (Some(from), Some(to)) = (by_name.get(e.from.as_str()), by_name.get(e.to.as_str())) else {
            continue;
        };
        if to.index >= from.index {
            bad.push(format!(
                "{} ({}, member #{}) has a {} dependency on {} ({}, member #{}), which is not listed before it",
                from.name,
                from.path,
                from.index + 1,
                e.kind,
                to.name,
                to.path,
                to.index + 1
            ));
        }
    }
    bad
}

/// The workspace crates, in `members` order, and every dependency edge they declare.
fn workspace() -> (Vec<Member>, Vec<Edge>) {
    let root = workspace_root();
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).expect("read root Cargo.toml");
    let order = members_in_order(&toml);
    assert!(!order.is_empty(), "root Cargo.toml lists no members");

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages array");

    let mut members = Vec::new();
    let mut edges = Vec::new();
    for p in packages {
        let name = p["name"].as_str().expect("package name").to_string();
        let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
        let dir = manifest.parent().expect("manifest has a directory");
        let rel = dir.strip_prefix(&root).unwrap_or(dir).to_string_lossy().to_string();
        let index = order
            .iter()
            .position(|m| *m == rel)
            .unwrap_or_else(|| panic!("workspace crate {name} ({rel}) is not in the root Cargo.toml members list"));
        members.push(Member { name: name.clone(), path: rel, index });
        for d in p["dependencies"].as_array().expect("dependencies array") {
            edges.push(Edge {
                from: name.clone(),
                to: d["name"].as_str().expect("dependency name").to_string(),
                kind: d["kind"].as_str().unwrap_or("normal").to_string(),
            });
        }
    }
    assert_eq!(members.len(), order.len(), "members list {order:?} and cargo metadata disagree");
    (members, edges)
}

/// The workspace crates `from` depends on (any kind).
fn workspace_deps_of<'a>(from: &str, members: &[Member], edges: &'a [Edge]) -> Vec<&'a str> {
    let is_member = |name: &str| members.iter().any(|m| m.name == name);
    edges.iter().filter(|e| e.from == from && is_member(&e.to)).map(|e| e.to.as_str()).collect()
}

#[test]
fn every_crate_depends_only_on_crates_listed_before_it() {
    let (members, edges) = workspace();
    let bad = violations(&members, &edges);
    assert!(bad.is_empty(), "layering violated (see docs/ARCHITECTURE.md):\n  {}", bad.join("\n  "));
}

/// The crates the layer tables of the docs name, in order: the `` `crate` `` of each
/// row's second cell (`| # | Crate | … |`).
fn crates_in_layer_table(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix('|'))
        .filter(|cells| cells.split('|').next().is_some_and(|n| n.trim().parse::<usize>().is_ok()))
        .filter_map(|cells| cells.split('|').nth(1))
        .map(|c| c.trim().trim_matches('`').to_string())
        .collect()
}

/// The one page's table and the detailed one list exactly the workspace members, lowest
/// first, so a reader of either sees the order the layering rule enforces.
#[test]
fn the_layer_tables_list_the_members_in_order() {
    let root = workspace_root();
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).expect("read root Cargo.toml");
    let members: Vec<String> =
        members_in_order(&toml).iter().map(|m| m.trim_start_matches("crates/").to_string()).collect();
    for page in ["docs/ARCHITECTURE.md", "docs/design/layers.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap_or_else(|e| panic!("read {page}: {e}"));
        assert_eq!(crates_in_layer_table(&text), members, "{page}'s layer table and Cargo.toml `members` disagree");
    }
}

#[test]
fn fuse_depends_on_no_engine_crate_below_dataset() {
    let (members, edges) = workspace();
    let below = engine_crates_below("tarn-dataset", &members);
    let reached: Vec<&str> =
        workspace_deps_of("tarn-fuse", &members, &edges).into_iter().filter(|d| below.contains(d)).collect();
    assert!(reached.is_empty(), "tarn-fuse must use only the dataset API and above, but depends on {reached:?}");
}

/// The send stream sits above `pool` and reaches the engine through the pool's narrow
/// replication API, the dataset's receive calls, and the tree walk and stored-block reads
/// (`objects`, `zio`): never the txg engine, the devices or the caches themselves.
#[test]
fn send_reaches_the_engine_only_through_pool_dataset_objects_and_zio() {
    let (members, edges) = workspace();
    let pool = members.iter().find(|m| m.name == "tarn-pool").expect("tarn-pool is a member").index;
    let send = members.iter().find(|m| m.name == "tarn-send").expect("tarn-send is a member").index;
    assert!(send > pool, "tarn-send must be listed after tarn-pool");
    let allowed = ["tarn-pool", "tarn-dataset", "tarn-objects", "tarn-zio"];
    let normal: Vec<&str> = edges
        .iter()
        .filter(|e| e.from == "tarn-send" && e.kind == "normal" && members.iter().any(|m| m.name == e.to))
        .map(|e| e.to.as_str())
        .filter(|d| !allowed.contains(d))
        .collect();
    assert!(normal.is_empty(), "tarn-send depends on {normal:?} beyond {allowed:?}");
}

#[test]
fn fuse_sources_use_no_engine_crate_below_dataset() {
    let (members, _) = workspace();
    let below = engine_crates_below("tarn-dataset", &members);
    let src = workspace_root().join("crates/fuse/src");
    let mut bad = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            for krate in &below {
                if names_crate(line, krate) {
                    bad.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "tarn-fuse reaches past the dataset API:\n  {}", bad.join("\n  "));
}

/// The engine crates listed before `name` (the daemon plumbing and the pacer stand
/// beside the engine: a layer may use the daemon plumbing wherever it sits).
fn engine_crates_below<'a>(name: &str, members: &'a [Member]) -> Vec<&'a str> {
    const BESIDE_THE_ENGINE: [&str; 2] = ["tarn-daemon", "tarn-pacer"];
    let at = members.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("{name} is a workspace member")).index;
    members
        .iter()
        .filter(|m| m.index < at && !BESIDE_THE_ENGINE.contains(&m.name.as_str()))
        .map(|m| m.name.as_str())
        .collect()
}

/// True if the code part of `line` (before any `//`) names crate `krate` as a path
/// (`tarn_objects::…`, `use tarn_objects`, `extern crate tarn_objects`).
fn names_crate(line: &str, krate: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    let ident = krate.replace('-', "_");
    code.match_indices(&ident).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + ident.len()..].chars().next();
        let starts_ident = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let ends_ident = !after.is_some_and(|c| c.is_alphanumeric() || c == '_');
        starts_ident && ends_ident
    })
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_crate_path_is_found_in_code_not_in_comments_or_longer_names() {
    assert!(names_crate("use tarn_objects::Timespec;", "tarn-objects"));
    assert!(names_crate("    let t = tarn_objects::Timespec::now();", "tarn-objects"));
    assert!(!names_crate("use tarn_dataset::Timespec; // was tarn_objects::Timespec", "tarn-objects"));
    assert!(!names_crate("use my_tarn_objects_shim::X;", "tarn-objects"));
}

#[test]
fn an_upward_edge_is_reported_by_name() {
    let m = |name: &str, index| Member { name: name.into(), path: format!("crates/{name}"), index };
    let members = [m("low", 0), m("high", 1)];
    let edge = |from: &str, to: &str| Edge { from: from.into(), to: to.into(), kind: "normal".into() };
    assert!(violations(&members, &[edge("high", "low"), edge("low", "serde")]).is_empty());
    let bad = violations(&members, &[edge("low", "high")]);
    assert_eq!(bad.len(), 1);
    assert!(bad[0].contains("low (crates/low, member #1) has a normal dependency on high"), "{}", bad[0]);
    assert_eq!(violations(&members, &[edge("low", "low")]).len(), 1, "a self edge is not below");
}

#[test]
fn members_list_is_parsed_in_order_without_comments() {
    let toml = "[workspace]\n# members are layers\nmembers = [\n  \"crates/a\", # first\n  \"crates/b\",\n]\n";
    assert_eq!(members_in_order(toml), vec!["crates/a".to_string(), "crates/b".to_string()]);
}
